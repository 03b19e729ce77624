// The K-quant and IQ4_XS matmul: every ISA's kernel is the plain reference's bits on shapes with
// every tail, the reference is the dequantized weights' product up to the activations'
// rounding, the unpacked integer form is the decoder's weights, and the quantizer's error is
// bounded per format.
#define BOOST_TEST_MODULE kernels_kquant_matmul
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kquant_weight.h"
#include "tests/support/random.h"

using namespace troupe::kernels;
using troupe::test::random_floats;

namespace {

struct isa_guard {
  isa saved = active_isa();
  ~isa_guard() { set_active_isa(saved); }
};

constexpr kquant_type all[] = {kquant_type::q2_k, kquant_type::q3_k, kquant_type::q4_k,
                               kquant_type::q5_k, kquant_type::q6_k, kquant_type::iq4_xs};

std::vector<std::uint8_t> quantize(kquant_type t, const std::vector<float>& w, std::size_t n, std::size_t k) {
  const std::size_t rb = k / kquant_block * kquant_block_bytes(t);
  std::vector<std::uint8_t> rows(n * rb);
  for (std::size_t r = 0; r < n; ++r) quantize_kquant_row(t, w.data() + r * k, k, rows.data() + r * rb);
  return rows;
}

// Weights whose runs differ in range, so every run's scale and min differ.
std::vector<float> uneven_weights(std::size_t count, std::uint64_t seed) {
  auto w = random_floats(count, seed);
  for (std::size_t i = 0; i < count; ++i) w[i] = w[i] * (0.2f + float(i / 16 % 7)) + (i / 32 % 3 == 0 ? 0.3f : 0.0f);
  return w;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_unpacked_form_stands_for_the_decoders_weights) {
  const std::size_t k = 512;
  const auto w = uneven_weights(k, 3);
  for (kquant_type t : all) {
    const auto row = quantize(t, w, 1, k);
    std::vector<float> deq(k);
    dequantize_kquant_row(t, row.data(), k, deq.data());
    for (std::size_t b = 0; b < k / kquant_block; ++b) {
      kquant_unpacked u;
      unpack_kquant_block(t, row.data() + b * kquant_block_bytes(t), u);
      for (std::size_t i = 0; i < kquant_block; ++i) {
        const std::size_t s = i / kquant_run;
        const double want = kquant_folded(t) ? double(u.d) * (double(u.scale[s]) * u.q[i] - u.min[s])
                                             : double(u.d) * u.scale[s] * u.q[i] - double(u.dmin) * u.min[s];
        BOOST_TEST_REQUIRE(std::fabs(want - deq[b * kquant_block + i]) <= 1e-6 * (1 + std::fabs(want)),
                           kquant_name(t) << " weight " << b * kquant_block + i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_quantizer_stays_within_each_formats_error) {
  // RMS error over RMS weight: a bound per format's bits (about halving per added bit), with
  // margin over what the plain scales give here; a broken layout or scale is off by far more.
  const std::pair<kquant_type, double> bound[] = {{kquant_type::q2_k, 0.40}, {kquant_type::q3_k, 0.22},
                                                  {kquant_type::q4_k, 0.10}, {kquant_type::q5_k, 0.05},
                                                  {kquant_type::q6_k, 0.025}, {kquant_type::iq4_xs, 0.10}};
  const std::size_t n = 8, k = 1024;
  const auto w = uneven_weights(n * k, 5);
  for (const auto& [t, most] : bound) {
    const auto rows = quantize(t, w, n, k);
    std::vector<float> deq(n * k);
    for (std::size_t r = 0; r < n; ++r) dequantize_kquant_row(t, rows.data() + r * (rows.size() / n), k, deq.data() + r * k);
    double err = 0, ref = 0;
    for (std::size_t i = 0; i < n * k; ++i) err += (deq[i] - w[i]) * (deq[i] - w[i]), ref += double(w[i]) * w[i];
    const double rel = std::sqrt(err / ref);
    BOOST_TEST_MESSAGE(kquant_name(t) << " relative RMS error " << rel);
    BOOST_TEST(rel < most, kquant_name(t) << ": " << rel);
    BOOST_TEST(rel > 0.0, kquant_name(t) << " lost nothing: the test's weights are too easy");
  }
}

BOOST_AUTO_TEST_CASE(every_isa_is_the_reference_bit_for_bit) {
  isa_guard guard;
  // Outputs in tiles of 4 with a partial last tile, rows one to past a tile of 8 (unpacked panels
  // from 8 rows for Q6_K, 16 for Q5_K and IQ4_XS: tails of 1, 3, 6 and 7), one to four
  // super-blocks per row; a row's outputs split across tasks where n is large.
  const std::vector<std::array<std::size_t, 3>> shapes = {{1, 1, 256},   {1, 7, 512},   {3, 33, 256},  {5, 70, 768},
                                                          {17, 12, 1024}, {1, 301, 256}, {9, 4, 256},   {14, 20, 512},
                                                          {11, 17, 256},  {15, 5, 256},  {22, 9, 512},  {31, 18, 256}};
  for (kquant_type t : all)
    for (auto& sh : shapes) {
      const std::size_t rows = sh[0], n = sh[1], k = sh[2];
      const auto x = random_floats(rows * k, 100 + rows, 3.0f);
      const auto stored = quantize(t, uneven_weights(n * k, 200 + n), n, k);
      const auto bias = random_floats(n, 300);
      const kquant_weight qw = make_kquant_weight(t, stored.data(), n, k);
      for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
        std::vector<float> ref(rows * n);
        kquant_linear_reference(x.data(), rows, t, stored.data(), n, k, b, ref.data());
        int checked = 0;
        for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
          if (!set_active_isa(i)) continue;
          std::vector<float> y(rows * n, -1.0f);
          kquant_linear(x.data(), rows, qw, b, y.data());
          BOOST_TEST_REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0,
                             kquant_name(t) << " " << isa_name(i) << " rows " << rows << " n " << n << " k " << k);
          ++checked;
        }
        BOOST_TEST(checked >= 1);
        std::vector<float> one(n);  // a row's outputs do not depend on the rows beside it
        kquant_linear(x.data() + (rows - 1) * k, 1, qw, b, one.data());
        BOOST_TEST_REQUIRE(std::memcmp(one.data(), ref.data() + (rows - 1) * n, n * 4) == 0);
      }
    }
}

BOOST_AUTO_TEST_CASE(extreme_quants_and_zero_activation_blocks_are_the_references_on_every_isa) {
  // The largest integer sums: every quant and activation at its end of the range (iq4_xs's
  // level 113 or -127 against 127), and a zero activation block (scale 0).
  isa_guard guard;
  const std::size_t rows = 2, n = 6, k = 512;
  std::vector<float> x(rows * k);
  for (std::size_t i = 0; i < k; ++i) x[i] = i % 2 ? 127.0f : -127.0f, x[k + i] = i < 256 ? 0.0f : 1.0f;
  std::vector<float> w(n * k);
  for (std::size_t i = 0; i < n * k; ++i) w[i] = (i / 7) % 2 ? 5.0f : -5.0f;
  for (kquant_type t : all) {
    const auto stored = quantize(t, w, n, k);
    const kquant_weight qw = make_kquant_weight(t, stored.data(), n, k);
    std::vector<float> ref(rows * n);
    kquant_linear_reference(x.data(), rows, t, stored.data(), n, k, nullptr, ref.data());
    for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
      if (!set_active_isa(i)) continue;
      std::vector<float> y(rows * n, -1.0f);
      kquant_linear(x.data(), rows, qw, nullptr, y.data());
      BOOST_TEST_REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0, kquant_name(t) << " " << isa_name(i));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_reference_is_the_dequantized_product_up_to_the_activations_rounding) {
  const std::size_t rows = 3, n = 24, k = 512;
  const auto x = random_floats(rows * k, 5);
  const auto w = uneven_weights(n * k, 6);
  for (kquant_type t : all) {
    const auto stored = quantize(t, w, n, k);
    std::vector<float> ref(rows * n), deq(k);
    kquant_linear_reference(x.data(), rows, t, stored.data(), n, k, nullptr, ref.data());
    for (std::size_t c = 0; c < n; ++c) {
      dequantize_kquant_row(t, stored.data() + c * (stored.size() / n), k, deq.data());
      for (std::size_t r = 0; r < rows; ++r) {
        double exact = 0, bound = 0;
        for (std::size_t b = 0; b < k / kquant_block; ++b) {
          double amax = 0;
          for (std::size_t i = b * kquant_block; i < (b + 1) * kquant_block; ++i) amax = std::max(amax, std::fabs(double(x[r * k + i])));
          for (std::size_t i = b * kquant_block; i < (b + 1) * kquant_block; ++i) {
            exact += double(x[r * k + i]) * deq[i];
            bound += std::fabs(double(deq[i])) * amax / 254;  // each activation moves by at most half a step
          }
        }
        BOOST_TEST_REQUIRE(std::fabs(ref[r * n + c] - exact) <= bound * 1.01 + 1e-3, kquant_name(t) << " output " << c);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_weight_reports_the_bytes_it_reads) {
  // The file's rows, or for Q4_K its panels of 16 outputs (2368 bytes per panel and block).
  const std::size_t n = 40, k = 512;
  for (kquant_type t : all) {
    const auto stored = quantize(t, uneven_weights(n * k, 9), n, k);
    const auto w = make_kquant_weight(t, stored.data(), n, k);
    BOOST_TEST(w.bytes() == (kquant_panelled(t) ? 3 * 2 * kquant_record_bytes(t) : n * 2 * kquant_block_bytes(t)), kquant_name(t));
  }
}

BOOST_AUTO_TEST_CASE(a_panel_holds_each_outputs_blocks) {
  const std::size_t n = 21, k = 512;  // a second, partial panel
  for (kquant_type t : {kquant_type::q4_k, kquant_type::q5_k, kquant_type::q6_k, kquant_type::iq4_xs}) {
    const auto stored = quantize(t, uneven_weights(n * k, 12), n, k);
    const auto w = make_kquant_weight(t, stored.data(), n, k);
    BOOST_TEST_REQUIRE(w.panelled());
    for (std::size_t out = 0; out < n; ++out)
      for (std::size_t b = 0; b < 2; ++b) {
        kquant_unpacked want, got;
        unpack_kquant_block(t, stored.data() + (out * 2 + b) * kquant_block_bytes(t), want);
        unpack_kquant_record(t, w.data.get() + ((out / 16) * 2 + b) * kquant_record_bytes(t), out % 16, got);
        BOOST_TEST_REQUIRE(std::memcmp(&want, &got, sizeof want) == 0, kquant_name(t) << " output " << out << " block " << b);
      }
  }
}
