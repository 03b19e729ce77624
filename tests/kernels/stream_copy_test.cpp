// stream_copy against memcpy: every length 0..300 at every source and destination alignment
// 0..15, and a few large copies, byte for byte; nothing outside the destination range written.
#define BOOST_TEST_MODULE stream_copy
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/stream_copy.h"

BOOST_AUTO_TEST_CASE(equals_memcpy_at_every_length_and_alignment) {
  std::mt19937 rng(3);
  std::vector<std::uint8_t> src(400), got(432), want(432);
  for (auto& b : src) b = std::uint8_t(rng());
  for (std::size_t n = 0; n <= 300; ++n)
    for (std::size_t sa = 0; sa < 16; ++sa)
      for (std::size_t da = 0; da < 16; ++da) {
        std::fill(got.begin(), got.end(), 0xAB);
        std::fill(want.begin(), want.end(), 0xAB);
        troupe::kernels::stream_copy(got.data() + da, src.data() + sa, n);
        troupe::kernels::stream_fence();
        std::memcpy(want.data() + da, src.data() + sa, n);
        if (got != want) BOOST_FAIL("length " << n << ", source offset " << sa << ", destination offset " << da);
      }
}

BOOST_AUTO_TEST_CASE(large_copies_are_exact) {
  std::mt19937_64 rng(5);
  for (std::size_t n : {std::size_t(1) << 16, (std::size_t(1) << 20) + 7, std::size_t(3) << 22}) {
    std::vector<std::uint8_t> src(n), dst(n + 1, 0);
    for (auto& b : src) b = std::uint8_t(rng());
    troupe::kernels::stream_copy(dst.data() + 1, src.data(), n);
    troupe::kernels::stream_fence();
    BOOST_TEST(std::memcmp(dst.data() + 1, src.data(), n) == 0, "length " << n);
    BOOST_TEST(dst[0] == 0);
  }
}
