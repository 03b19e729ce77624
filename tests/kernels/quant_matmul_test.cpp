// The quantized formats and the int8 matmul: every ISA's kernel is the plain reference's bits,
// the reference is the dequantized weights' product up to the activations' rounding, and the
// stored blocks are GGML's.
#define BOOST_TEST_MODULE kernels_quant_matmul
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant_weight.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/support/random.h"

using namespace troupe::kernels;
using troupe::test::random_floats;

namespace {

struct isa_guard {
  isa saved = active_isa();
  ~isa_guard() { set_active_isa(saved); }
};

struct stored {
  std::vector<std::uint8_t> rows;
  std::vector<float> scales;  // int8 only
};

stored quantize(quant_type t, const std::vector<float>& w, std::size_t n, std::size_t k) {
  stored s;
  s.rows.resize(n * quant_row_bytes(t, k));
  s.scales.resize(n);
  for (std::size_t r = 0; r < n; ++r) quantize_row(t, w.data() + r * k, k, s.rows.data() + r * quant_row_bytes(t, k), &s.scales[r]);
  return s;
}

const quant_type all_types[] = {quant_type::q8_0, quant_type::q4_0, quant_type::int8};

}  // namespace

BOOST_AUTO_TEST_CASE(blocks_are_laid_out_as_ggml_defines_them) {
  // One block of 32: q8_0's scale is max|x| / 127; q4_0's maps the largest magnitude to -8.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[std::size_t(i)] = float(i - 12) / 4;  // -3 .. 4.75
  std::vector<std::uint8_t> q8(34), q4(18);
  quantize_row(quant_type::q8_0, x.data(), 32, q8.data(), nullptr);
  quantize_row(quant_type::q4_0, x.data(), 32, q4.data(), nullptr);
  std::uint16_t d8, d4;
  std::memcpy(&d8, q8.data(), 2);
  std::memcpy(&d4, q4.data(), 2);
  BOOST_TEST(d8 == f32_to_f16(4.75f / 127));
  BOOST_TEST(std::int8_t(q8[2 + 31]) == 127);
  BOOST_TEST(std::int8_t(q8[2 + 0]) == std::int8_t(std::lround(-3.0f / (4.75f / 127))));
  BOOST_TEST(d4 == f32_to_f16(4.75f / -8));
  BOOST_TEST((q4[2 + 15] >> 4) == 0);      // element 31 (4.75) is the high nibble of byte 15: -8
  BOOST_TEST((q4[2 + 12] & 0x0f) == 8);    // element 12 is 0
  BOOST_TEST(quant_row_bytes(quant_type::q8_0, 64) == 68u);
  BOOST_TEST(quant_row_bytes(quant_type::q4_0, 64) == 36u);
}

BOOST_AUTO_TEST_CASE(dequantized_weights_stay_within_half_a_step_save_q4_0s_clipped_end) {
  const std::size_t n = 5, k = 96;
  auto w = random_floats(n * k, 7);
  for (quant_type t : all_types) {
    auto s = quantize(t, w, n, k);
    std::vector<float> back(k);
    for (std::size_t r = 0; r < n; ++r) {
      const std::uint8_t* row = s.rows.data() + r * quant_row_bytes(t, k);
      dequantize_row(t, row, k, s.scales[r], back.data());
      for (std::size_t i = 0; i < k; ++i) {
        const float step = t == quant_type::int8 ? s.scales[r] : std::fabs(f16_to_f32(block_scale_bits(t, row, i / 32)));
        // q4_0 has 7 steps above zero and 8 below: the far end opposite the largest magnitude clips.
        const float most = t == quant_type::q4_0 ? step : step * 0.5f;
        BOOST_TEST_REQUIRE(std::fabs(back[i] - w[r * k + i]) <= most + 1e-3f, quant_name(t) << " row " << r << " col " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_isa_is_the_reference_bit_for_bit) {
  isa_guard guard;
  // The last shape is batch 1 of a long row, which takes panels in pairs within a task. Its
  // panels are an odd number, so some task holds an odd count of at least three whatever the
  // split (the first tasks take most of them): pairs and a lone panel. The last panel is partly
  // past n.
  const std::size_t long_n = quant_panel * 39 - 5;
  const std::vector<std::array<std::size_t, 3>> shapes = {{1, 16, 32},   {3, 70, 96},    {4, 33, 256},   {5, 64, 64},
                                                          {17, 100, 128}, {40, 48, 320}, {1, long_n, 4096}};
  for (quant_type t : all_types)
    for (auto& sh : shapes) {
      const std::size_t rows = sh[0], n = sh[1], k = sh[2];
      auto x = random_floats(rows * k, 100 + rows, 3.0f);
      auto w = random_floats(n * k, 200 + n);
      auto bias = random_floats(n, 300);
      auto s = quantize(t, w, n, k);
      auto qw = pack_quant_weight(t, s.rows.data(), s.scales.data(), n, k);
      for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
        std::vector<float> ref(rows * n);
        quant_linear_reference(x.data(), rows, t, s.rows.data(), s.scales.data(), n, k, b, ref.data());
        int checked = 0;
        for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
          if (!set_active_isa(i)) continue;
          std::vector<float> y(rows * n, -1.0f);
          quant_linear(x.data(), rows, qw, b, y.data());
          BOOST_TEST_REQUIRE(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0,
                             quant_name(t) << " " << isa_name(i) << " rows " << rows << " n " << n << " k " << k);
          ++checked;
        }
        BOOST_TEST(checked >= 1);
        // A row's outputs do not depend on which other rows share the call.
        std::vector<float> one(n);
        quant_linear(x.data() + (rows - 1) * k, 1, qw, b, one.data());
        BOOST_TEST_REQUIRE(std::memcmp(one.data(), ref.data() + (rows - 1) * n, n * 4) == 0);
      }
    }
}

BOOST_AUTO_TEST_CASE(activation_rounding_ties_and_zero_blocks_are_the_references_on_every_isa) {
  // Each ISA quantizes activations with its own vector code; these rows put every element of a
  // block exactly halfway between two quants (max 127, so the scale is 1), or zero the block.
  isa_guard guard;
  const std::size_t rows = 3, n = 20, k = 96;
  std::vector<float> x(rows * k, 0.0f);
  for (std::size_t i = 0; i < k; ++i) {
    x[i] = i % 32 == 0 ? 127.0f : float(int(i % 9) - 4) + 0.5f;              // ties: -3.5 .. 4.5
    x[k + i] = i % 32 == 5 ? -127.0f : -(float(int(i % 7)) + 0.5f);          // negative ties
    x[2 * k + i] = i < 32 ? 0.0f : (i % 32 == 1 ? 50.8f : float(i % 5) * 0.2f);  // a zero block
  }
  auto w = random_floats(n * k, 11);
  for (quant_type t : all_types) {
    auto s = quantize(t, w, n, k);
    auto qw = pack_quant_weight(t, s.rows.data(), s.scales.data(), n, k);
    std::vector<float> ref(rows * n);
    quant_linear_reference(x.data(), rows, t, s.rows.data(), s.scales.data(), n, k, nullptr, ref.data());
    for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
      if (!set_active_isa(i)) continue;
      for (std::size_t r = 0; r < rows; ++r) {  // one row at a time too: the batch-1 kernels
        std::vector<float> y(n, -1.0f);
        quant_linear(x.data() + r * k, 1, qw, nullptr, y.data());
        BOOST_TEST_REQUIRE(std::memcmp(y.data(), ref.data() + r * n, n * 4) == 0, quant_name(t) << " " << isa_name(i) << " row " << r);
      }
      std::vector<float> all(rows * n, -1.0f);
      quant_linear(x.data(), rows, qw, nullptr, all.data());
      BOOST_TEST_REQUIRE(std::memcmp(all.data(), ref.data(), all.size() * 4) == 0, quant_name(t) << " " << isa_name(i));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_reference_is_the_dequantized_product_up_to_the_activations_rounding) {
  const std::size_t rows = 3, n = 40, k = 256;
  auto x = random_floats(rows * k, 5);
  auto w = random_floats(n * k, 6);
  for (quant_type t : all_types) {
    auto s = quantize(t, w, n, k);
    std::vector<float> ref(rows * n), deq(k);
    quant_linear_reference(x.data(), rows, t, s.rows.data(), s.scales.data(), n, k, nullptr, ref.data());
    for (std::size_t c = 0; c < n; ++c) {
      dequantize_row(t, s.rows.data() + c * quant_row_bytes(t, k), k, s.scales[c], deq.data());
      for (std::size_t r = 0; r < rows; ++r) {
        double exact = 0, mag = 0;
        for (std::size_t i = 0; i < k; ++i) exact += double(x[r * k + i]) * deq[i], mag += std::fabs(double(x[r * k + i]) * deq[i]);
        // Each activation moves by at most half its block's step (max|x| / 254).
        BOOST_TEST_REQUIRE(std::fabs(ref[r * n + c] - exact) <= mag / 254 * 1.01 + 1e-4, quant_name(t));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_packed_weight_reports_the_bytes_it_reads) {
  const std::size_t n = 64, k = 128;
  auto w = random_floats(n * k, 9);
  auto s8 = quantize(quant_type::q8_0, w, n, k);
  auto s4 = quantize(quant_type::q4_0, w, n, k);
  BOOST_TEST(pack_quant_weight(quant_type::q8_0, s8.rows.data(), nullptr, n, k).bytes() == n * k / 32 * 34);
  BOOST_TEST(pack_quant_weight(quant_type::q4_0, s4.rows.data(), nullptr, n, k).bytes() == n * k / 32 * 18);
}
