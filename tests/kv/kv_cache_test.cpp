// The KV cache's int8 rows: what a slot holds read back within half a quantization step of what
// was written (each token's head with its own scale), a zero row stays zero, and a pool of the
// same bytes holds about twice the blocks of f16 (head_dim 64: 128 / 66 bytes per row).
#define BOOST_TEST_MODULE kv_cache
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kv/kv_cache.h"
#include "tests/support/random.h"

using namespace troupe;
using kernels::dtype;

BOOST_AUTO_TEST_CASE(int8_rows_read_back_within_half_a_step_per_head) {
  const int layers = 2, n_kv = 3, hd = 64;
  kv::kv_cache c({4, 16, dtype::int8, false}, layers, n_kv, hd);
  BOOST_TEST(c.block_bytes() == 16u * n_kv * (hd + 2));
  auto k = test::random_floats(std::size_t(n_kv) * hd, 1, 2.0f), v = test::random_floats(std::size_t(n_kv) * hd, 2, 0.01f);
  for (int d = 0; d < hd; ++d) k[std::size_t(hd) + std::size_t(d)] = 0.0f;  // head 1 of K all zero
  c.write(1, 2, 5, k.data(), v.data());
  std::vector<float> k2(k.size()), v2(v.size());
  c.read(1, 2, 5, k2.data(), v2.data());
  for (const auto* pair : {&k, &v}) {
    const auto& x = *pair;
    const auto& y = pair == &k ? k2 : v2;
    for (int h = 0; h < n_kv; ++h) {
      float amax = 0;
      for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[std::size_t(h * hd + d)]));
      for (int d = 0; d < hd; ++d)
        BOOST_TEST_REQUIRE(std::fabs(y[std::size_t(h * hd + d)] - x[std::size_t(h * hd + d)]) <= amax / 127 * 0.51f + 1e-12f,
                           "head " << h << " element " << d);
    }
  }
  for (int d = 0; d < hd; ++d) BOOST_TEST_REQUIRE(k2[std::size_t(hd + d)] == 0.0f);
  // Other slots and layers untouched.
  c.read(0, 2, 5, k2.data(), v2.data());
  BOOST_TEST(std::all_of(k2.begin(), k2.end(), [](float f) { return f == 0.0f; }));
}

BOOST_AUTO_TEST_CASE(a_pool_of_the_same_bytes_holds_about_twice_the_blocks) {
  const std::size_t bytes = std::size_t(1) << 30;
  const int f16 = kv::kv_cache::blocks_in(bytes, 16, dtype::f16, 22, 4, 64);
  const int int8 = kv::kv_cache::blocks_in(bytes, 16, dtype::int8, 22, 4, 64);
  BOOST_TEST_MESSAGE("1 GiB of KV for the 1b preset: " << f16 << " f16 blocks, " << int8 << " int8 blocks");
  BOOST_TEST(double(int8) / f16 > 1.93);  // 128 / 66 bytes per row
  BOOST_TEST(kv::kv_cache::bytes_per_token(dtype::int8, 22, 4, 64) == 2u * 22 * 4 * 66);
}
