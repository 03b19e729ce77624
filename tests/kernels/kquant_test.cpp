// The K-quant and IQ4_XS reference decoders against blocks packed here, element by element,
// from the format definitions (kquant.h): random quants and scales in, the weights they stand
// for out, for every element of two blocks per format.
#include <boost/test/unit_test.hpp>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/kquant.h"

using namespace troupe::kernels;

namespace {

void put_f16(std::uint8_t* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Sets `bits` wide field at bit `shift` of byte p[i] to v.
void put_bits(std::uint8_t* p, std::size_t i, int shift, int bits, int v) {
  const int mask = ((1 << bits) - 1) << shift;
  p[i] = std::uint8_t((p[i] & ~mask) | ((v << shift) & mask));
}

// q2_k's and q3_k's low two bits of weight e: their byte within qs, and the bit they start at.
// A half of 128 weights is 32 bytes; a run of 32 weights is one bit pair of them; a group of 16
// is 16 of those bytes.
std::pair<std::size_t, int> two_bit_place(int e) {
  const int half = e / 128, run = e % 128 / 32, group = e % 32 / 16, l = e % 16;
  return {std::size_t(half * 32 + group * 16 + l), 2 * run};
}

struct block_case {
  std::vector<std::uint8_t> bytes;
  std::array<float, 256> expected{};
};

// Powers of two: every product below is exact in f32, so the comparison can be exact.
constexpr float d = 0.5f, dmin = 0.25f;

block_case pack_q2_k(std::mt19937& rng) {
  block_case c;
  c.bytes.assign(84, 0);
  put_f16(&c.bytes[80], d);
  put_f16(&c.bytes[82], dmin);
  std::array<int, 16> sc{}, mn{};
  for (int s = 0; s < 16; ++s) {
    sc[std::size_t(s)] = int(rng() % 16);
    mn[std::size_t(s)] = int(rng() % 16);
    c.bytes[std::size_t(s)] = std::uint8_t(sc[std::size_t(s)] | (mn[std::size_t(s)] << 4));
  }
  for (int e = 0; e < 256; ++e) {
    const int q = int(rng() % 4), sub = e / 16;
    const auto [byte, shift] = two_bit_place(e);
    put_bits(c.bytes.data(), 16 + byte, shift, 2, q);
    c.expected[std::size_t(e)] = d * float(sc[std::size_t(sub)] * q) - dmin * float(mn[std::size_t(sub)]);
  }
  return c;
}

block_case pack_q3_k(std::mt19937& rng) {
  block_case c;
  c.bytes.assign(110, 0);
  put_f16(&c.bytes[108], d);
  std::array<int, 16> sc{};
  for (int s = 0; s < 16; ++s) {
    sc[std::size_t(s)] = int(rng() % 64);  // stored + 32
    // low nibble: byte s (s < 8, low half) or byte s - 8 (high half); top bits: byte 8 + s % 4
    put_bits(c.bytes.data(), std::size_t(96 + s % 8), s < 8 ? 0 : 4, 4, sc[std::size_t(s)] & 15);
    put_bits(c.bytes.data(), std::size_t(96 + 8 + s % 4), 2 * (s / 4), 2, sc[std::size_t(s)] >> 4);
  }
  for (int e = 0; e < 256; ++e) {
    const int q = int(rng() % 8) - 4, sub = e / 16;  // -4..3: the third bit clear subtracts 4
    const int half = e / 128, run = e % 128 / 32, group = e % 32 / 16, l = e % 16;
    const int stored = q + 4;
    const auto [byte, shift] = two_bit_place(e);
    put_bits(c.bytes.data(), 32 + byte, shift, 2, stored & 3);
    put_bits(c.bytes.data(), std::size_t(group * 16 + l), half * 4 + run, 1, stored >> 2);
    c.expected[std::size_t(e)] = d * float((sc[std::size_t(sub)] - 32) * q);
  }
  return c;
}

// q4_k and q5_k's twelve bytes of eight six-bit scales and mins.
void pack_scale_min_k4(std::uint8_t* s, const std::array<int, 8>& sc, const std::array<int, 8>& mn) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      put_bits(s, std::size_t(j), 0, 6, sc[std::size_t(j)]);
      put_bits(s, std::size_t(j + 4), 0, 6, mn[std::size_t(j)]);
    } else {
      put_bits(s, std::size_t(j + 4), 0, 4, sc[std::size_t(j)] & 15);
      put_bits(s, std::size_t(j - 4), 6, 2, sc[std::size_t(j)] >> 4);
      put_bits(s, std::size_t(j + 4), 4, 4, mn[std::size_t(j)] & 15);
      put_bits(s, std::size_t(j), 6, 2, mn[std::size_t(j)] >> 4);
    }
  }
}

block_case pack_q45_k(std::mt19937& rng, bool five) {
  block_case c;
  c.bytes.assign(five ? 176 : 144, 0);
  put_f16(&c.bytes[0], d);
  put_f16(&c.bytes[2], dmin);
  std::array<int, 8> sc{}, mn{};
  for (int j = 0; j < 8; ++j) {
    sc[std::size_t(j)] = int(rng() % 64);
    mn[std::size_t(j)] = int(rng() % 64);
  }
  pack_scale_min_k4(&c.bytes[4], sc, mn);
  const std::size_t qs = five ? 48 : 16;
  for (int e = 0; e < 256; ++e) {
    const int q = int(rng() % (five ? 32 : 16)), sub = e / 32, l = e % 32;
    put_bits(c.bytes.data(), qs + std::size_t(sub / 2 * 32 + l), 4 * (sub % 2), 4, q & 15);
    if (five) put_bits(c.bytes.data(), std::size_t(16 + l), sub, 1, q >> 4);
    c.expected[std::size_t(e)] = d * float(sc[std::size_t(sub)] * q) - dmin * float(mn[std::size_t(sub)]);
  }
  return c;
}

block_case pack_q6_k(std::mt19937& rng) {
  block_case c;
  c.bytes.assign(210, 0);
  put_f16(&c.bytes[208], d);
  std::array<int, 16> sc{};
  for (int s = 0; s < 16; ++s) {
    sc[std::size_t(s)] = int(rng() % 256) - 128;
    c.bytes[std::size_t(192 + s)] = std::uint8_t(std::int8_t(sc[std::size_t(s)]));
  }
  for (int e = 0; e < 256; ++e) {
    const int q = int(rng() % 64), sub = e / 16;  // stored; the weight is q - 32
    const int half = e / 128, run = e % 128 / 32, l = e % 32;
    put_bits(c.bytes.data(), std::size_t(half * 64 + (run % 2) * 32 + l), run < 2 ? 0 : 4, 4, q & 15);
    put_bits(c.bytes.data(), std::size_t(128 + half * 32 + l), 2 * run, 2, q >> 4);
    c.expected[std::size_t(e)] = d * float(sc[std::size_t(sub)] * (q - 32));
  }
  return c;
}

block_case pack_iq4_xs(std::mt19937& rng) {
  static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  block_case c;
  c.bytes.assign(136, 0);
  put_f16(&c.bytes[0], d);
  std::array<int, 8> sc{};
  std::uint16_t high = 0;
  for (int s = 0; s < 8; ++s) {
    sc[std::size_t(s)] = int(rng() % 64);  // stored + 32
    put_bits(c.bytes.data(), std::size_t(4 + s / 2), 4 * (s % 2), 4, sc[std::size_t(s)] & 15);
    high = std::uint16_t(high | ((sc[std::size_t(s)] >> 4) << (2 * s)));
  }
  std::memcpy(&c.bytes[2], &high, 2);
  for (int e = 0; e < 256; ++e) {
    const int q = int(rng() % 16), sub = e / 32, j = e % 32;
    put_bits(c.bytes.data(), std::size_t(8 + sub * 16 + j % 16), j < 16 ? 0 : 4, 4, q);
    c.expected[std::size_t(e)] = d * float((sc[std::size_t(sub)] - 32) * levels[q]);
  }
  return c;
}

block_case pack(kquant_type t, std::mt19937& rng) {
  switch (t) {
    case kquant_type::q2_k: return pack_q2_k(rng);
    case kquant_type::q3_k: return pack_q3_k(rng);
    case kquant_type::q4_k: return pack_q45_k(rng, false);
    case kquant_type::q5_k: return pack_q45_k(rng, true);
    case kquant_type::q6_k: return pack_q6_k(rng);
    case kquant_type::iq4_xs: return pack_iq4_xs(rng);
  }
  return {};
}

constexpr kquant_type all[] = {kquant_type::q2_k, kquant_type::q3_k, kquant_type::q4_k,
                               kquant_type::q5_k, kquant_type::q6_k, kquant_type::iq4_xs};

}  // namespace

BOOST_AUTO_TEST_CASE(each_format_decodes_the_weights_its_blocks_were_packed_with) {
  std::mt19937 rng(11);
  for (kquant_type t : all) {
    // A row of two blocks, each packed on its own: the second block's offset is exercised too.
    const block_case a = pack(t, rng), b = pack(t, rng);
    BOOST_REQUIRE_EQUAL(a.bytes.size(), kquant_block_bytes(t));
    std::vector<std::uint8_t> row(a.bytes);
    row.insert(row.end(), b.bytes.begin(), b.bytes.end());
    std::vector<float> out(2 * kquant_block, -1e30f);
    dequantize_kquant_row(t, row.data(), out.size(), out.data());
    int wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const float want = i < kquant_block ? a.expected[i] : b.expected[i - kquant_block];
      if (out[i] != want && ++wrong <= 4)
        BOOST_ERROR(kquant_name(t) << " weight " << i << ": " << out[i] << ", packed as " << want);
    }
    BOOST_CHECK_MESSAGE(wrong == 0, kquant_name(t) << ": " << wrong << " of " << out.size() << " weights wrong");
  }
}

BOOST_AUTO_TEST_CASE(gguf_type_numbers_name_the_formats) {
  // ggml's numbering: Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_XS 23; others are not these.
  const std::pair<std::uint32_t, kquant_type> known[] = {{10, kquant_type::q2_k}, {11, kquant_type::q3_k},
                                                         {12, kquant_type::q4_k}, {13, kquant_type::q5_k},
                                                         {14, kquant_type::q6_k}, {23, kquant_type::iq4_xs}};
  for (const auto& [n, t] : known) BOOST_CHECK(kquant_of_ggml(n) == t);
  for (std::uint32_t n : {0u, 1u, 2u, 8u, 15u, 20u, 30u}) BOOST_CHECK(!kquant_of_ggml(n));
}
