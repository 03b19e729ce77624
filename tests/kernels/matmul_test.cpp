#define BOOST_TEST_MODULE kernels_matmul
#include <boost/test/unit_test.hpp>

#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/random.h"

using namespace troupe::kernels;
using troupe::test::random_floats;

namespace {

// Stores w in type t (rounded), returns the raw buffer and the values it now holds as f32.
std::vector<std::uint8_t> encode(const std::vector<float>& w, dtype t, std::vector<float>& held) {
  std::vector<std::uint8_t> raw(w.size() * dtype_size(t));
  held.resize(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    store_from_f32(raw.data(), t, i, w[i]);
    held[i] = load_as_f32(raw.data(), t, i);
  }
  return raw;
}

std::vector<double> reference(const std::vector<float>& x, std::size_t rows,
                              const std::vector<float>& w, std::size_t n, std::size_t k,
                              const std::vector<float>* bias) {
  std::vector<double> y(rows * n);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < n; ++c) {
      double acc = 0;
      for (std::size_t i = 0; i < k; ++i) acc += double(x[r * k + i]) * w[c * k + i];
      y[r * n + c] = acc + (bias ? (*bias)[c] : 0.0);
    }
  return y;
}

// The AnonHugePages (kB) of the /proc/self/smaps mapping that holds p; -1 when none does.
long huge_kb_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) inside = at >= lo && at < hi;
    else if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

struct isa_guard {
  isa saved = active_isa();
  ~isa_guard() { set_active_isa(saved); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(matches_double_reference_for_every_dtype_and_shape) {
  const std::size_t shapes[][3] = {{1, 16, 16}, {3, 37, 19}, {7, 64, 130}, {13, 200, 48}, {100, 96, 257}};
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (auto& s : shapes) {
      std::size_t rows = s[0], n = s[1], k = s[2];
      auto x = random_floats(rows * k, 1 + rows);
      auto w0 = random_floats(n * k, 2 + n);
      auto bias = random_floats(n, 3);
      std::vector<float> w;
      auto raw = encode(w0, t, w);
      auto pw = pack_weight(raw.data(), t, n, k);
      BOOST_TEST(packed_at(pw, n - 1, k - 1) == w[(n - 1) * k + k - 1]);
      auto ref = reference(x, rows, w, n, k, &bias);
      std::vector<float> y(rows * n, NAN);
      gemm(x.data(), rows, pw, bias.data(), y.data());
      for (std::size_t i = 0; i < y.size(); ++i) {
        // f32 accumulation of k products of magnitude <= 1: error bound ~ k * eps * sum|terms|.
        BOOST_TEST_REQUIRE(std::abs(y[i] - ref[i]) <= 1e-6 * k + 1e-6, "dtype " << dtype_name(t) << " i " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(each_row_is_the_same_bits_whatever_the_batch) {
  const std::size_t n = 150, k = 333;
  for (dtype t : {dtype::f32, dtype::f16}) {
    auto x = random_floats(48 * k, 7);
    std::vector<float> w;
    auto raw = encode(random_floats(n * k, 8), t, w);
    auto pw = pack_weight(raw.data(), t, n, k);
    std::vector<float> all(48 * n);
    gemm(x.data(), 48, pw, nullptr, all.data());
    // gemv runs up to one tile in one pass, then up to four tiles over slices of k (k = 333 is
    // not a whole number of slices), then tile after tile.
    for (std::size_t rows : {1, 2, 3, 5, 7, 8, 17, 24, 25}) {
      for (std::size_t start : {0, 9, 23}) {
        std::vector<float> part(rows * n), small(rows * n);
        gemm(x.data() + start * k, rows, pw, nullptr, part.data());
        gemv(x.data() + start * k, rows, pw, nullptr, small.data());
        BOOST_TEST_REQUIRE(std::memcmp(part.data(), all.data() + start * n, part.size() * 4) == 0);
        BOOST_TEST_REQUIRE(std::memcmp(small.data(), all.data() + start * n, small.size() * 4) == 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_isa_gives_identical_bits) {
  isa_guard guard;
  const std::size_t rows = 11, n = 90, k = 131;
  auto x = random_floats(rows * k, 11);
  auto bias = random_floats(n, 12);
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    std::vector<float> w;
    auto raw = encode(random_floats(n * k, 13), t, w);
    auto pw = pack_weight(raw.data(), t, n, k);
    std::vector<float> base(rows * n);
    set_active_isa(isa::scalar);
    gemm(x.data(), rows, pw, bias.data(), base.data());
    for (isa i : {isa::avx2, isa::avx512}) {
      if (!set_active_isa(i)) continue;
      std::vector<float> y(rows * n), v(rows * n);
      gemm(x.data(), rows, pw, bias.data(), y.data());
      gemv(x.data(), rows, pw, bias.data(), v.data());
      BOOST_TEST_REQUIRE(std::memcmp(y.data(), base.data(), y.size() * 4) == 0, isa_name(i));
      BOOST_TEST_REQUIRE(std::memcmp(v.data(), base.data(), v.size() * 4) == 0, isa_name(i));
    }
  }
}

BOOST_AUTO_TEST_CASE(stream_split_covers_every_panel_once_in_whole_units_most_in_the_first_runs) {
  const std::size_t threads = std::size_t(num_threads());
  for (std::size_t unit : {std::size_t(1), std::size_t(4)})
    for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(7), std::size_t(128), std::size_t(2001)}) {
      const std::vector<std::size_t> cut = stream_split(n, unit);
      BOOST_TEST_REQUIRE(cut.size() >= 2u);
      BOOST_TEST(cut.front() == 0u);
      BOOST_TEST(cut.back() == n);
      for (std::size_t i = 1; i < cut.size(); ++i) {
        BOOST_TEST(cut[i] > cut[i - 1]);                              // no empty run, in order
        if (i + 1 < cut.size()) BOOST_TEST(cut[i] % unit == 0u);      // whole units but the last
      }
      BOOST_TEST(cut.size() - 1 <= 3 * threads);
      // One long run per thread first: between them about 80% of the work.
      if (n >= 100 * unit * threads) {
        BOOST_TEST(cut[threads] >= n * 3 / 4);
        BOOST_TEST(cut[threads] <= n * 17 / 20);
      }
    }
}

BOOST_AUTO_TEST_CASE(weights_land_in_huge_pages_even_where_malloc_has_faulted_memory_to_reuse) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream mode;
  mode << thp.rdbuf();
  if (!thp || mode.str().find("[never]") != std::string::npos) {
    BOOST_TEST_MESSAGE("transparent huge pages are off here: nothing to check");
    return;
  }
  // The loader frees large temporaries before it allocates weights, so malloc holds memory that
  // is already faulted in 4 KiB pages: advice given to that memory changes nothing (down_proj's
  // weights once came back with none of their 8 MiB in huge pages).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  {
    // Through a volatile pointer, so the compiler cannot elide the buffer.
    char* volatile used = static_cast<char*>(std::malloc(std::size_t(24) << 20));
    std::memset(used, 1, std::size_t(24) << 20);
    std::free(used);
  }
  const std::size_t size = std::size_t(13) << 19;  // 6.5 MiB, as down_proj of the 1b preset in q4_0
  auto w = alloc_weight_bytes(size);
  std::memset(w.get(), 1, size);
  mallopt(M_MMAP_THRESHOLD, 128 << 10);  // glibc's defaults
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(w.get()) % (std::size_t(2) << 20) == 0u);
  const long huge_kb = huge_kb_at(w.get());
  BOOST_TEST(huge_kb >= 2048, "the weight's mapping holds " << huge_kb << " kB of huge pages");
}
