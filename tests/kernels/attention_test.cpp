#define BOOST_TEST_MODULE kernels_attention
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/support/random.h"

using namespace troupe::kernels;
using troupe::test::random_floats;

namespace {

// A paged cache holding one sequence of `len` positions in shuffled blocks: random rows, or the
// rows given (`k_vals`, `v_vals`: [len][n_kv][hd]). An int8 row is its quants and f16 scale.
struct cache_fixture {
  int block_size = 16, n_kv = 2, hd = 32, blocks = 0;
  dtype type;
  std::vector<std::uint8_t> k, v;
  std::vector<std::int32_t> table;
  std::vector<float> k_held, v_held;  // [len][n_kv][hd], the values as stored

  cache_fixture(int len, dtype t, std::uint64_t seed, const std::vector<float>* k_vals = nullptr,
                const std::vector<float>* v_vals = nullptr)
      : type(t) {
    blocks = (len + block_size - 1) / block_size + 3;
    const std::size_t rb = kv_row_bytes(t, std::size_t(hd)), rows = std::size_t(blocks) * block_size * n_kv;
    k.assign(rows * rb, 0);
    v.assign(rows * rb, 0);
    for (int b = 0; b * block_size < len; ++b) table.push_back((b * 5 + 2) % blocks);
    const auto kr = k_vals ? *k_vals : random_floats(std::size_t(len) * n_kv * hd, seed, 1.5f);
    const auto vr = v_vals ? *v_vals : random_floats(std::size_t(len) * n_kv * hd, seed + 1);
    k_held.resize(kr.size());
    v_held.resize(vr.size());
    for (int p = 0; p < len; ++p)
      for (int h = 0; h < n_kv; ++h) {
        const std::size_t src = (std::size_t(p) * n_kv + h) * hd;
        const std::size_t row = (std::size_t(table[p / block_size]) * block_size + p % block_size) * n_kv + h;
        put_row(k.data() + row * rb, &kr[src], &k_held[src]);
        put_row(v.data() + row * rb, &vr[src], &v_held[src]);
      }
  }
  // One row stored, and the values it holds read back.
  void put_row(std::uint8_t* at, const float* x, float* held) const {
    if (type != dtype::int8) {
      for (int d = 0; d < hd; ++d) store_from_f32(at, type, std::size_t(d), x[d]), held[d] = load_as_f32(at, type, std::size_t(d));
      return;
    }
    float amax = 0;
    for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
    const std::uint16_t s = f32_to_f16(amax / 127);
    for (int d = 0; d < hd; ++d) {
      const auto q = std::int8_t(std::lround(x[d] / f16_to_f32(s)));
      at[d] = std::uint8_t(q);
      held[d] = float(q) * f16_to_f32(s);
    }
    std::memcpy(at + hd, &s, 2);
  }
  paged_kv_layer layer() const { return {k.data(), v.data(), type, block_size, n_kv, hd}; }
};

std::vector<double> reference(const cache_fixture& c, const std::vector<float>& q, int n_heads,
                              const std::vector<std::int32_t>& pos, float scale, int window = 0, double softcap = 0) {
  int group = n_heads / c.n_kv;
  std::vector<double> out(pos.size() * n_heads * c.hd, 0.0);
  for (std::size_t t = 0; t < pos.size(); ++t)
    for (int h = 0; h < n_heads; ++h) {
      int kvh = h / group;
      std::vector<double> s(pos[t] + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos[t]; ++p) {
        double d = 0;
        for (int i = 0; i < c.hd; ++i)
          d += double(q[(t * n_heads + h) * c.hd + i]) * c.k_held[(std::size_t(p) * c.n_kv + kvh) * c.hd + i];
        s[p] = d * scale;
        if (softcap > 0) s[p] = softcap * std::tanh(s[p] / softcap);
        if (window > 0 && pos[t] - p >= window) s[p] = -1e300;  // outside the window: no weight
        mx = std::max(mx, s[p]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int p = 0; p <= pos[t]; ++p)
        for (int i = 0; i < c.hd; ++i)
          out[(t * n_heads + h) * c.hd + i] += s[p] / sum * c.v_held[(std::size_t(p) * c.n_kv + kvh) * c.hd + i];
    }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(matches_reference_for_decode_and_prefill_with_gqa) {
  for (dtype t : {dtype::f32, dtype::f16}) {
    const int len = 300, n_heads = 8;
    cache_fixture c(len, t, 5);
    // Prefill-with-cache: tokens at 250..299 after the cache holds 0..249; plus decode rows.
    std::vector<std::int32_t> pos;
    for (int p = 250; p < 300; ++p) pos.push_back(p);
    pos.push_back(0);
    pos.push_back(127);
    pos.push_back(128);
    std::vector<const std::int32_t*> tables(pos.size(), c.table.data());
    auto q = random_floats(pos.size() * n_heads * c.hd, 9, 1.5f);
    std::vector<float> out(q.size());
    float scale = 1.0f / std::sqrt(float(c.hd));
    paged_attention(q.data(), pos.size(), n_heads, pos.data(), tables.data(), c.layer(), scale, out.data());
    auto ref = reference(c, q, n_heads, pos, scale);
    for (std::size_t i = 0; i < out.size(); ++i)
      BOOST_TEST_REQUIRE(std::abs(out[i] - ref[i]) < 2e-6, dtype_name(t) << " element " << i);
  }
}

BOOST_AUTO_TEST_CASE(a_token_gets_the_same_bits_alone_or_batched_and_on_every_isa) {
  const int len = 200, n_heads = 4;
  cache_fixture c(len, dtype::f16, 21);
  std::vector<std::int32_t> pos(len);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<const std::int32_t*> tables(len, c.table.data());
  auto q = random_floats(pos.size() * n_heads * c.hd, 22);
  std::vector<float> all(q.size());
  const isa saved = active_isa();
  set_active_isa(isa::scalar);
  paged_attention(q.data(), len, n_heads, pos.data(), tables.data(), c.layer(), 0.2f, all.data());
  for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
    if (!set_active_isa(i)) continue;
    for (int t : {0, 1, 130, 199}) {
      std::size_t row = std::size_t(n_heads) * c.hd;
      std::vector<float> one(row);
      paged_attention(q.data() + t * row, 1, n_heads, &pos[t], &tables[t], c.layer(), 0.2f, one.data());
      BOOST_TEST_REQUIRE(std::memcmp(one.data(), all.data() + t * row, row * 4) == 0, isa_name(i) << " t " << t);
    }
  }
  set_active_isa(saved);
}

BOOST_AUTO_TEST_CASE(int8_kv_is_attention_over_the_values_it_holds_on_every_isa) {
  // An int8 row's values are its quants times its scale: attention over them equals attention
  // over an f32 cache holding those values, bit for bit, on every ISA.
  const int len = 75, n_heads = 4;
  cache_fixture q8(len, dtype::int8, 31);
  cache_fixture f32(len, dtype::f32, 0, &q8.k_held, &q8.v_held);
  BOOST_TEST_REQUIRE((f32.k_held == q8.k_held));
  std::vector<std::int32_t> pos = {0, 15, 16, 40, 74};
  std::vector<const std::int32_t*> tables(pos.size(), q8.table.data());
  std::vector<const std::int32_t*> ftables(pos.size(), f32.table.data());
  const auto q = random_floats(pos.size() * n_heads * q8.hd, 32);
  const isa saved = active_isa();
  for (isa i : {isa::scalar, isa::avx2, isa::avx512}) {
    if (!set_active_isa(i)) continue;
    std::vector<float> a(q.size()), b(q.size());
    paged_attention(q.data(), pos.size(), n_heads, pos.data(), tables.data(), q8.layer(), 0.3f, a.data());
    paged_attention(q.data(), pos.size(), n_heads, pos.data(), ftables.data(), f32.layer(), 0.3f, b.data());
    BOOST_TEST_REQUIRE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0, isa_name(i));
  }
  set_active_isa(saved);
  // And the quantization error is what 8 bits give: each held value within half a step.
  const auto exact = random_floats(std::size_t(len) * q8.n_kv * q8.hd, 31, 1.5f);
  for (std::size_t r = 0; r < exact.size() / q8.hd; ++r) {
    float amax = 0;
    for (int d = 0; d < q8.hd; ++d) amax = std::max(amax, std::fabs(exact[r * q8.hd + d]));
    for (int d = 0; d < q8.hd; ++d)
      BOOST_TEST_REQUIRE(std::fabs(q8.k_held[r * q8.hd + d] - exact[r * q8.hd + d]) <= amax / 127 * 0.502f);
  }
}

// Gemma's and Mistral's attention: a window of the last `window` positions (the token itself
// included), and Gemma 2's soft cap on the scores; the rows before the window may hold anything.
BOOST_AUTO_TEST_CASE(a_window_and_a_soft_cap_match_the_reference) {
  const int len = 300, n_heads = 8;
  cache_fixture c(len, dtype::f32, 5);
  std::vector<std::int32_t> pos;
  for (int p = 250; p < 300; ++p) pos.push_back(p);
  for (int p : {0, 5, 31, 32, 33, 127}) pos.push_back(p);
  std::vector<const std::int32_t*> tables(pos.size(), c.table.data());
  auto q = random_floats(pos.size() * n_heads * c.hd, 9, 3.0f);
  const float scale = 1.0f / std::sqrt(float(c.hd));
  for (auto [window, softcap] : {std::pair<int, float>{32, 0.0f}, {0, 2.0f}, {33, 1.5f}, {1, 0.0f}}) {
    std::vector<float> out(q.size());
    paged_attention(q.data(), pos.size(), n_heads, pos.data(), tables.data(), c.layer(), attention_options{scale, window, softcap},
                    out.data());
    const auto ref = reference(c, q, n_heads, pos, scale, window, softcap);
    for (std::size_t i = 0; i < out.size(); ++i)
      BOOST_TEST_REQUIRE(std::abs(out[i] - ref[i]) < 2e-6, "window " << window << " softcap " << softcap << " element " << i);
  }
  // Outside the window the cache is never read: rows there may be garbage (later: freed blocks).
  cache_fixture d = c;
  for (int p = 0; p < 250 - 32; ++p)
    for (int h = 0; h < d.n_kv; ++h) {
      const std::size_t row = (std::size_t(d.table[p / d.block_size]) * d.block_size + p % d.block_size) * d.n_kv + h;
      std::fill_n(reinterpret_cast<float*>(d.k.data()) + row * d.hd, d.hd, NAN);
    }
  const std::vector<std::int32_t> late(pos.begin(), pos.begin() + 50);
  std::vector<float> a(late.size() * n_heads * c.hd), b(a.size());
  paged_attention(q.data(), late.size(), n_heads, late.data(), tables.data(), c.layer(), attention_options{scale, 32}, a.data());
  paged_attention(q.data(), late.size(), n_heads, late.data(), tables.data(), d.layer(), attention_options{scale, 32}, b.data());
  BOOST_TEST(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}
