#define BOOST_TEST_MODULE kernels_elementwise
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/swiglu.h"
#include "tests/support/random.h"

using namespace troupe::kernels;
using troupe::test::random_floats;

BOOST_AUTO_TEST_CASE(rmsnorm_matches_reference) {
  const std::size_t rows = 5, dim = 96;
  auto x = random_floats(rows * dim, 1, 3.0f);
  auto w = random_floats(dim, 2);
  std::vector<float> y(x.size());
  rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, y.data());
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (std::size_t i = 0; i < dim; ++i)
      BOOST_TEST_REQUIRE(std::abs(y[r * dim + i] - x[r * dim + i] * inv * w[i]) < 1e-6);
  }
  rmsnorm(x.data(), rows, dim, w.data(), 1e-5f, x.data());  // in place
  BOOST_TEST(x == y);
}

BOOST_AUTO_TEST_CASE(rope_rotates_half_pairs_by_position_angle) {
  const std::size_t heads = 3, hd = 8, half = 4;
  std::vector<int> pos = {0, 5, 1000};
  std::vector<double> inv_freq(half);
  for (std::size_t i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(10000.0, 2.0 * i / hd);
  std::vector<float> c(pos.size() * half), s(pos.size() * half);
  rope_tables(pos.data(), pos.size(), inv_freq.data(), half, c.data(), s.data());
  auto x = random_floats(pos.size() * heads * hd, 3);
  auto orig = x;
  rope(x.data(), pos.size(), heads, hd, c.data(), s.data());
  for (std::size_t t = 0; t < pos.size(); ++t)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < half; ++i) {
        double a = orig[(t * heads + h) * hd + i], b = orig[(t * heads + h) * hd + i + half];
        double ang = pos[t] * inv_freq[i];
        BOOST_TEST_REQUIRE(std::abs(x[(t * heads + h) * hd + i] - (a * std::cos(ang) - b * std::sin(ang))) < 1e-6);
        BOOST_TEST_REQUIRE(std::abs(x[(t * heads + h) * hd + i + half] - (b * std::cos(ang) + a * std::sin(ang))) < 1e-6);
      }
  // Position 0 is the identity.
  for (std::size_t i = 0; i < heads * hd; ++i) BOOST_TEST_REQUIRE(x[i] == orig[i]);
}

// Partial rotary (Phi-4-mini: 3/4 of each head): the first rotary_dim elements rotate in pairs
// (i, i + rotary_dim/2); the rest of the head is untouched.
BOOST_AUTO_TEST_CASE(partial_rope_rotates_the_first_dims_and_keeps_the_rest) {
  const std::size_t heads = 2, hd = 16, rot = 12, half = rot / 2;
  std::vector<int> pos = {0, 3, 700};
  std::vector<double> inv_freq(half);
  for (std::size_t i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(10000.0, 2.0 * i / rot);
  std::vector<float> c(pos.size() * half), s(pos.size() * half);
  rope_tables(pos.data(), pos.size(), inv_freq.data(), half, c.data(), s.data());
  auto x = random_floats(pos.size() * heads * hd, 5);
  const auto orig = x;
  rope(x.data(), pos.size(), heads, hd, rot, c.data(), s.data());
  for (std::size_t t = 0; t < pos.size(); ++t)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t at = (t * heads + h) * hd;
      for (std::size_t i = 0; i < half; ++i) {
        const double a = orig[at + i], b = orig[at + i + half], ang = pos[t] * inv_freq[i];
        BOOST_TEST_REQUIRE(std::abs(x[at + i] - (a * std::cos(ang) - b * std::sin(ang))) < 1e-5);
        BOOST_TEST_REQUIRE(std::abs(x[at + i + half] - (b * std::cos(ang) + a * std::sin(ang))) < 1e-5);
      }
      for (std::size_t i = rot; i < hd; ++i) BOOST_TEST_REQUIRE(x[at + i] == orig[at + i]);
    }
}

// A gated activation's output for one row of gate_up (gate then up, dim = gu.size() / 2) under the
// scalar ISA, after checking that every other ISA gives the same bits, and element 33 the same
// first in a row of 5 (all tail), then inside a row of 16 (all body).
namespace {

using gated_activation = void (*)(const float*, std::size_t, std::size_t, float*);
std::vector<float> same_bits_on_every_isa_and_in_the_tail(gated_activation fn, const std::vector<float>& gu) {
  const std::size_t dim = gu.size() / 2;
  std::vector<float> want(dim);
  const isa saved = active_isa();
  set_active_isa(isa::scalar);
  fn(gu.data(), 1, dim, want.data());
  for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
    if (!set_active_isa(i)) continue;
    std::vector<float> got(dim);
    fn(gu.data(), 1, dim, got.data());
    BOOST_TEST_REQUIRE(std::memcmp(got.data(), want.data(), dim * 4) == 0, isa_name(i));
    for (std::size_t len : {std::size_t(5), std::size_t(16)}) {
      std::vector<float> row(2 * len, 0.0f), out(len);
      row[0] = gu[33], row[len] = gu[dim + 33];
      fn(row.data(), 1, len, out.data());
      BOOST_TEST_REQUIRE(std::memcmp(&out[0], &want[33], 4) == 0, isa_name(i) << " row of " << len);
    }
  }
  set_active_isa(saved);
  return want;
}

}  // namespace

// Rows shorter than the kernel's pieces of 1,024, and rows of several pieces with a short last one.
// The vector exp runs the same IEEE steps everywhere: a gate's output has the same bits on every
// ISA, and in a row's vector body or its tail; large gates of either sign stay finite.
BOOST_AUTO_TEST_CASE(swiglu_gives_the_same_bits_on_every_isa_and_in_the_tail) {
  const std::size_t dim = 37;  // two vectors and a tail of 5
  auto gu = random_floats(2 * dim, 7, 12.0f);
  gu[0] = 200.0f, gu[1] = -200.0f, gu[2] = 0.0f;
  const auto want = same_bits_on_every_isa_and_in_the_tail(swiglu, gu);
  for (float v : want) BOOST_TEST_REQUIRE(std::isfinite(v));
  BOOST_TEST(want[0] == 200.0f * gu[dim]);
  BOOST_TEST(std::abs(want[1]) < 1e-30f);
  BOOST_TEST(want[2] == 0.0f);
}

BOOST_AUTO_TEST_CASE(swiglu_is_silu_gate_times_up) {
  for (auto [rows, dim] : {std::pair<std::size_t, std::size_t>{4, 40}, {1, 2500}, {3, 2048}}) {
    auto gu = random_floats(rows * 2 * dim, 4, 6.0f);
    std::vector<float> out(rows * dim);
    swiglu(gu.data(), rows, dim, out.data());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < dim; ++i) {
        double g = gu[r * 2 * dim + i], u = gu[r * 2 * dim + dim + i];
        BOOST_TEST_REQUIRE(std::abs(out[r * dim + i] - g / (1 + std::exp(-g)) * u) < 1e-5, "rows " << rows << " dim " << dim << " at " << r << ", " << i);
      }
  }
}

// GeGLU's vector form (a sigmoid of twice the tanh's argument, two exps) gives the same bits on
// every ISA and in the tail, and stays finite at large gates of either sign.
BOOST_AUTO_TEST_CASE(geglu_gives_the_same_bits_on_every_isa_and_in_the_tail) {
  const std::size_t dim = 37;
  auto gu = random_floats(2 * dim, 9, 6.0f);
  gu[0] = 200.0f, gu[1] = -200.0f, gu[2] = 0.0f, gu[3] = 1e20f;
  const auto want = same_bits_on_every_isa_and_in_the_tail(geglu, gu);
  for (float v : want) BOOST_TEST_REQUIRE(std::isfinite(v));
  BOOST_TEST(want[0] == 200.0f * gu[dim]);
  BOOST_TEST(std::abs(want[1]) < 1e-30f);
  BOOST_TEST(want[2] == 0.0f);
  BOOST_TEST(want[3] == 1e20f * gu[dim + 3]);
}

// Gemma's MLP gate against the formula in double (PyTorch's gelu(approximate="tanh")).
BOOST_AUTO_TEST_CASE(geglu_is_tanh_gelu_gate_times_up) {
  for (auto [rows, dim] : {std::pair<std::size_t, std::size_t>{4, 40}, {1, 2500}}) {
    auto gu = random_floats(rows * 2 * dim, 5, 8.0f);
    std::vector<float> out(rows * dim);
    geglu(gu.data(), rows, dim, out.data());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < dim; ++i) {
        const double g = gu[r * 2 * dim + i], u = gu[r * 2 * dim + dim + i];
        const double want = 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
        BOOST_TEST_REQUIRE(std::abs(out[r * dim + i] - want) < 1e-5 * (1 + std::abs(want)), "rows " << rows << " dim " << dim << " at " << r << ", " << i);
      }
  }
}
