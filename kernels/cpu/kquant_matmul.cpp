// The K-quant and IQ4_XS matmul (see kquant_weight.h for the arithmetic every ISA reproduces
// bit for bit), compiled once per ISA like quant_matmul.cpp.
//
// On AVX-512 VNNI the panelled formats (Q4_K, Q5_K, Q6_K, IQ4_XS) run panel kernels: one lane
// per output, a tile of up to four activation rows per pass. Otherwise (Q3_K, Q2_K, or another
// ISA) a task takes its outputs four at a time: for each super-block it unpacks the four
// outputs' blocks (kquant_unpacked), then takes that block's sums against every activation
// row, so the unpacking is paid once per block however many rows there are.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kquant_weight.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace troupe::kernels::TROUPE_ISA {

namespace {

#if defined(__AVX512F__)
// The task and what it inlines: VNNI is asked for here rather than for the whole build, as
// quant_matmul.cpp does (quant_isa() takes AVX-512 only where the CPU has it).
#define TROUPE_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#else
#define TROUPE_VNNI
#endif

constexpr std::size_t tile_outputs = 4;

#if defined(__AVX2__)
// IQ4_XS's unsigned levels as the lookup table of a byte shuffle.
inline __m128i levels16() { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_unsigned_levels.data())); }
__m256i load32(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
void store32(std::uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Bit `bit` of every byte as 0/1 (a 16-bit shift moves each byte's bits within it once masked).
__m256i bit_of(__m256i v, int bit) { return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1)); }
__m256i bits_at(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(char(mask)));
}
__m256i shl(__m256i v, int n) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)); }  // bytes whose top bits are clear

// The quants of one block in element order (kquant_unpacked::q), 32 at a time.
void unpack_quants(kquant_type t, const std::uint8_t* b, std::uint8_t* q) {
  switch (t) {
    case kquant_type::q2_k:
    case kquant_type::q3_k: {
      const bool three = t == kquant_type::q3_k;
      const __m256i hmask = three ? load32(b) : _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const __m256i v = load32(b + (three ? 32 : 16) + half * 32);
        for (int run = 0; run < 4; ++run) {
          __m256i x = bits_at(v, 2 * run, 3);
          if (three) x = _mm256_or_si256(x, shl(bit_of(hmask, half * 4 + run), 2));
          store32(q + half * 128 + run * 32, x);
        }
      }
      return;
    }
    case kquant_type::q4_k:
    case kquant_type::q5_k: {
      const bool five = t == kquant_type::q5_k;
      const __m256i qh = five ? load32(b + 16) : _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i v = load32(b + (five ? 48 : 16) + c * 32);
        __m256i lo = bits_at(v, 0, 0x0f), hi = bits_at(v, 4, 0x0f);
        if (five) {
          lo = _mm256_or_si256(lo, shl(bit_of(qh, 2 * c), 4));
          hi = _mm256_or_si256(hi, shl(bit_of(qh, 2 * c + 1), 4));
        }
        store32(q + c * 64, lo);
        store32(q + c * 64 + 32, hi);
      }
      return;
    }
    case kquant_type::q6_k:
      for (int half = 0; half < 2; ++half) {
        const __m256i l0 = load32(b + half * 64), l1 = load32(b + half * 64 + 32), qh = load32(b + 128 + half * 32);
        const __m256i low[4] = {bits_at(l0, 0, 0x0f), bits_at(l1, 0, 0x0f), bits_at(l0, 4, 0x0f), bits_at(l1, 4, 0x0f)};
        for (int run = 0; run < 4; ++run)
          store32(q + half * 128 + run * 32, _mm256_or_si256(low[run], shl(bits_at(qh, 2 * run, 3), 4)));
      }
      return;
    case kquant_type::iq4_xs: {
      const __m256i table = _mm256_broadcastsi128_si256(levels16());
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p and 2p + 1: 16 bytes each, one per 128-bit lane
        const __m256i v = load32(b + 8 + p * 32);
        const __m256i lo = _mm256_shuffle_epi8(table, bits_at(v, 0, 0x0f)), hi = _mm256_shuffle_epi8(table, bits_at(v, 4, 0x0f));
        store32(q + p * 64, _mm256_permute2x128_si256(lo, hi, 0x20));
        store32(q + p * 64 + 32, _mm256_permute2x128_si256(lo, hi, 0x31));
      }
      return;
    }
  }
}

float f16_at(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
std::uint32_t u32_at(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Sixteen scales (bytes, signed or not) and sixteen mins as the int32 arrays of the unpacked form.
void put_runs(__m128i scales, __m128i mins, bool signed_scales, kquant_unpacked& u) {
  auto widen = [&](__m128i v) { return signed_scales ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v); };
  auto* sc = reinterpret_cast<__m256i*>(u.scale);
  auto* mn = reinterpret_cast<__m256i*>(u.min);
  _mm256_storeu_si256(sc, widen(scales));
  _mm256_storeu_si256(sc + 1, widen(_mm_srli_si128(scales, 8)));
  _mm256_storeu_si256(mn, _mm256_cvtepu8_epi32(mins));
  _mm256_storeu_si256(mn + 1, _mm256_cvtepu8_epi32(_mm_srli_si128(mins, 8)));
}

// The scalar reference's unpack_kquant_scales, in a few vector steps per format (the same
// values: the kernel tests compare every output bit).
void unpack_scales(kquant_type t, const std::uint8_t* b, kquant_unpacked& u) {
  const __m128i pairs = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);  // a 32-weight run's value twice
  switch (t) {
    case kquant_type::q2_k: {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), low = _mm_set1_epi8(0x0f);
      put_runs(_mm_and_si128(v, low), _mm_and_si128(_mm_srli_epi16(v, 4), low), false, u);
      u.d = f16_at(b + 80), u.dmin = f16_at(b + 82);
      return;
    }
    case kquant_type::q3_k: {
      // Low nibbles of bytes 0-7 are scales 0-7, their high nibbles 8-15; scale j's top two bits
      // are at bit 2 * (j / 4) of byte 8 + j % 4: one 32-bit lane per four scales, shifted apart.
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 96)), low = _mm_set1_epi8(0x0f);
      const __m128i nibbles = _mm_unpacklo_epi64(_mm_and_si128(v, low), _mm_and_si128(_mm_srli_epi16(v, 4), low));
      const __m128i top = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(int(u32_at(b + 104))), _mm_setr_epi32(0, 2, 4, 6)),
                                        _mm_set1_epi8(3));
      const __m128i scales = _mm_sub_epi8(_mm_or_si128(nibbles, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
      put_runs(scales, _mm_setzero_si128(), true, u);
      for (int s = 0; s < 16; ++s) u.min[s] = 4 * u.scale[s];
      u.d = f16_at(b + 108), u.dmin = 0;
      return;
    }
    case kquant_type::q4_k:
    case kquant_type::q5_k: {
      // Words a, b, c of the twelve bytes: scales 0-3 and mins 0-3 are a's and b's low six bits;
      // scales and mins 4-7 are c's nibbles with a's and b's top two bits above them.
      const std::uint32_t a = u32_at(b + 4), m = u32_at(b + 8), c = u32_at(b + 12);
      const __m128i v = _mm_setr_epi32(int(a & 0x3f3f3f3f), int((c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030)),
                                       int(m & 0x3f3f3f3f), int(((c >> 4) & 0x0f0f0f0f) | ((m >> 2) & 0x30303030)));
      put_runs(_mm_shuffle_epi8(v, pairs), _mm_shuffle_epi8(v, _mm_add_epi8(pairs, _mm_set1_epi8(8))), false, u);
      u.d = f16_at(b), u.dmin = f16_at(b + 2);
      return;
    }
    case kquant_type::q6_k: {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
      put_runs(v, _mm_setzero_si128(), true, u);
      for (int s = 0; s < 16; ++s) u.min[s] = 32 * u.scale[s];
      u.d = f16_at(b + 208), u.dmin = 0;
      return;
    }
    case kquant_type::iq4_xs: {
      // Eight 6-bit scales: nibbles of bytes 4-7 (low one first), two bits each of the u16 at 2.
      const __m128i v = _mm_cvtsi32_si128(int(u32_at(b + 4))), low = _mm_set1_epi8(0x0f);
      const __m128i nibbles = _mm_unpacklo_epi8(_mm_and_si128(v, low), _mm_and_si128(_mm_srli_epi16(v, 4), low));
      std::uint16_t h;
      std::memcpy(&h, b + 2, 2);
      std::uint64_t top = 0;
      for (int s = 0; s < 8; ++s) top |= std::uint64_t((h >> (2 * s)) & 3) << (8 * s + 4);
      const __m128i scales = _mm_sub_epi8(_mm_or_si128(nibbles, _mm_cvtsi64_si128(std::int64_t(top))), _mm_set1_epi8(32));
      put_runs(_mm_shuffle_epi8(scales, pairs), _mm_setzero_si128(), true, u);
      for (int s = 0; s < 16; ++s) u.min[s] = 128 * u.scale[s];
      u.d = f16_at(b), u.dmin = 0;
      return;
    }
  }
}

void unpack(kquant_type t, const std::uint8_t* b, kquant_unpacked& u) {
  unpack_scales(t, b, u);
  unpack_quants(t, b, u.q);
}
#else
void unpack(kquant_type t, const std::uint8_t* b, kquant_unpacked& u) { unpack_kquant_block(t, b, u); }
#endif

#if defined(__AVX2__)
// The integer sums of one block for four outputs at once, before their lanes are added up:
// sumq's lanes in q[j], summ's in m[j]. Then four outputs' lanes are added in one transpose
// (a horizontal sum per output per block cost more than the dot products), and the float steps
// run on the four outputs as the four lanes of one vector: each lane is kquant_block_step's
// arithmetic, so the bits are the reference's.
#if defined(__AVX512F__)
using lanes = __m512i;
TROUPE_VNNI inline void lane_sums(const kquant_unpacked& u, const std::int8_t* x, lanes xsum, lanes& q, lanes& m) {
  const __m512i scales = _mm512_loadu_si512(u.scale);
  const __m512i run_of_lane = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2);
  q = _mm512_setzero_si512();
  for (int j = 0; j < 4; ++j) {  // 64 weights: lane l holds 4 of them, of run 4j + l / 4
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(u.q + 64 * j), _mm512_loadu_si512(x + 64 * j));
    const __m512i sc = _mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_set1_epi32(4 * j), run_of_lane), scales);
    q = _mm512_add_epi32(q, _mm512_mullo_epi32(dot, sc));
  }
  m = _mm512_mullo_epi32(_mm512_loadu_si512(u.min), xsum);
}
TROUPE_VNNI inline lanes load_xsum(const std::int32_t* p) { return _mm512_loadu_si512(p); }
TROUPE_VNNI inline lanes sub(lanes a, lanes b) { return _mm512_sub_epi32(a, b); }
// Lane sums of v0..v3 as the four lanes of one vector.
TROUPE_VNNI inline __m128i reduce4(lanes v0, lanes v1, lanes v2, lanes v3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  const __m256i d = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
}
#else
using lanes = __m256i;
// Per run of 16: products in 16 bits (at most 241 * 127), then pairs of them times the run's
// scale into 32 bits.
inline void lane_sums(const kquant_unpacked& u, const std::int8_t* x, const __m256i* xsum, __m256i& q, __m256i& m) {
  q = _mm256_setzero_si256();
  for (int s = 0; s < 16; ++s) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.q + 16 * s)));
    const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 16 * s)));
    q = _mm256_add_epi32(q, _mm256_madd_epi16(_mm256_mullo_epi16(w, v), _mm256_set1_epi16(std::int16_t(u.scale[s]))));
  }
  const __m256i* mins = reinterpret_cast<const __m256i*>(u.min);
  m = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_loadu_si256(mins), _mm256_loadu_si256(xsum)),
                       _mm256_mullo_epi32(_mm256_loadu_si256(mins + 1), _mm256_loadu_si256(xsum + 1)));
}
inline lanes sub(lanes a, lanes b) { return _mm256_sub_epi32(a, b); }
inline __m128i reduce4(lanes v0, lanes v1, lanes v2, lanes v3) {
  const __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
}
#endif

// One activation row's block against the tile's four unpacked blocks, into acc[0..3].
TROUPE_VNNI inline void tile_row(const kquant_unpacked* u, const std::int8_t* x, const std::int32_t* xsum, float dx, bool folded,
                                 __m128 d, __m128 dmin, float* acc) {
#if defined(__AVX512F__)
  const lanes xs = load_xsum(xsum);
#else
  const __m256i* xs = reinterpret_cast<const __m256i*>(xsum);
#endif
  lanes q[4], m[4];
  for (int j = 0; j < 4; ++j) lane_sums(u[j], x, xs, q[j], m[j]);
  const __m128 vdx = _mm_set1_ps(dx);
  __m128 out = _mm_loadu_ps(acc);
  if (folded) {
    const __m128i s = reduce4(sub(q[0], m[0]), sub(q[1], m[1]), sub(q[2], m[2]), sub(q[3], m[3]));
    out = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(d, vdx), out);
  } else {
    out = _mm_fmadd_ps(_mm_cvtepi32_ps(reduce4(q[0], q[1], q[2], q[3])), _mm_mul_ps(d, vdx), out);
    const __m128 neg = _mm_xor_ps(_mm_mul_ps(dmin, vdx), _mm_set1_ps(-0.0f));
    out = _mm_fmadd_ps(_mm_cvtepi32_ps(reduce4(m[0], m[1], m[2], m[3])), neg, out);
  }
  _mm_storeu_ps(acc, out);
}
#else
void tile_row(const kquant_unpacked* u, const std::int8_t* x, const std::int32_t* xsum, float dx, bool folded, const float* d,
              const float* dmin, float* acc) {
  for (int j = 0; j < 4; ++j) {
    std::int32_t q = 0, m = 0;
    for (int s = 0; s < 16; ++s) {
      std::int32_t dot = 0;
      for (int i = 16 * s; i < 16 * s + 16; ++i) dot += u[j].q[i] * x[i];
      q += u[j].scale[s] * dot;
      m += u[j].min[s] * xsum[s];
    }
    acc[j] = kquant_block_step(folded, q, m, d[j], dmin[j], dx, acc[j]);
  }
}
#endif

}  // namespace

#if defined(__AVX512F__)
namespace {

// acc + the dot products of w's 4 bytes per lane with the 4 quants at x, broadcast: one
// instruction with an embedded broadcast, which GCC does not fold from the intrinsics (as in
// quant_matmul.cpp's dot4_bcast).
TROUPE_VNNI inline __m512i dot4(__m512i acc, __m512i w, const std::int8_t* x) {
#if defined(__GNUC__) && !defined(__clang__)
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const std::int32_t*>(x)));
  return acc;
#else
  std::int32_t v;
  std::memcpy(&v, x, 4);
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(v));
#endif
}

// Q4_K records (kquant_weight.h) for NR activation rows starting at r0: each lane is one of the
// panel's 16 outputs, so a sub-block's sums need no adding across lanes, and each output's
// integer sums and float steps are the reference's.
// The record two ahead of `rec`: a panel's records are read in order, one per block.
TROUPE_VNNI inline void prefetch_ahead(const std::uint8_t* rec, std::size_t record_bytes) {
  for (std::size_t off = 0; off < record_bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + 2 * record_bytes + off), _MM_HINT_T0);
}

// Rows r0.. of panel p's outputs (those below n), the bias added.
template <std::size_t NR>
TROUPE_VNNI inline void store_panel(const __m512* facc, std::size_t r0, const kquant_view& w, std::size_t p, const float* bias,
                                    float* y) {
  alignas(64) float out[kquant_panel];
  for (std::size_t r = 0; r < NR; ++r) {
    _mm512_store_ps(out, facc[r]);
    for (std::size_t j = 0; j < kquant_panel && p * kquant_panel + j < w.n; ++j) {
      const std::size_t o = p * kquant_panel + j;
      y[(r0 + r) * w.n + o] = bias ? out[j] + bias[o] : out[j];
    }
  }
}

// Q5_K (FIVE) adds each quant's fifth bit from its own area.
template <std::size_t NR, bool FIVE = false>
TROUPE_VNNI void q4k_panel_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p, const float* bias,
                                float* y) {
  constexpr std::size_t rb = FIVE ? q5k_record_bytes : q4k_record_bytes;
  const std::size_t kb = w.blocks;
  const std::uint8_t* rec = w.data + p * kb * rb;
  const __m512i low = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(0x01);
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b, rec += rb) {
    prefetch_ahead(rec, rb);
    __m512i sumq[NR], summ[NR];
    for (std::size_t r = 0; r < NR; ++r) sumq[r] = summ[r] = _mm512_setzero_si512();
    for (std::size_t c = 0; c < 4; ++c) {
      __m512i lo[NR], hi[NR];
      for (std::size_t r = 0; r < NR; ++r) lo[r] = hi[r] = _mm512_setzero_si512();
      for (std::size_t g = 0; g < 8; ++g) {
        const __m512i v = _mm512_loadu_si512(rec + 320 + (8 * c + g) * 64);
        __m512i l = _mm512_and_si512(v, low), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        if constexpr (FIVE) {  // bits 2 (g % 4) and 2 (g % 4) + 1 of the fifth-bit bytes, moved to bit 4
          const __m512i f = _mm512_loadu_si512(rec + 2368 + (2 * c + g / 4) * 64);
          const __m512i at = _mm512_srl_epi16(f, _mm_cvtsi32_si128(int(2 * (g % 4))));
          l = _mm512_or_si512(l, _mm512_slli_epi16(_mm512_and_si512(at, one), 4));
          h = _mm512_or_si512(h, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(at, 1), one), 4));
        }
        for (std::size_t r = 0; r < NR; ++r) {
          const std::int8_t* x = a.q + (r0 + r) * w.k + b * kquant_block + 64 * c + 4 * g;
          lo[r] = dot4(lo[r], l, x);
          hi[r] = dot4(hi[r], h, x + 32);
        }
      }
      auto widen = [&](std::size_t at) {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + at)));
      };
      const __m512i sc_lo = widen(64 + 16 * (2 * c)), sc_hi = widen(64 + 16 * (2 * c + 1));
      const __m512i mn_lo = widen(192 + 16 * (2 * c)), mn_hi = widen(192 + 16 * (2 * c + 1));
      for (std::size_t r = 0; r < NR; ++r) {
        const std::int32_t* xs = a.xsum + ((r0 + r) * kb + b) * 16 + 4 * c;  // runs of 16: sub-block 2c is runs 4c, 4c + 1
        sumq[r] = _mm512_add_epi32(sumq[r], _mm512_add_epi32(_mm512_mullo_epi32(lo[r], sc_lo), _mm512_mullo_epi32(hi[r], sc_hi)));
        summ[r] = _mm512_add_epi32(summ[r], _mm512_add_epi32(_mm512_mullo_epi32(mn_lo, _mm512_set1_epi32(xs[0] + xs[1])),
                                                             _mm512_mullo_epi32(mn_hi, _mm512_set1_epi32(xs[2] + xs[3]))));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
    for (std::size_t r = 0; r < NR; ++r) {
      const __m512 dx = _mm512_set1_ps(a.dx[(r0 + r) * kb + b]);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumq[r]), _mm512_mul_ps(d, dx), facc[r]);
      const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dmin, dx)), _mm512_set1_epi32(int(0x80000000u))));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ[r]), neg, facc[r]);
    }
  }
  store_panel<NR>(facc, r0, w, p, bias, y);
}

// The 6-bit quants of groups 2 gp and 2 gp + 1 of a Q6_K chunk (kquant_weight.h): from their two
// vectors of nibbles and the vector of their top bits, each quant's nibble with its two top bits
// above it. One bit-select (vpternlogd: bits 0-3 from the nibble, 4-5 from the top bits shifted
// into place) joins each pair: 13 operations for the four vectors, where masking and or-ing took 21.
struct q6k_quants {
  __m512i lo0, hi0, lo1, hi1;  // group 2 gp: weights 4 g + i (lo) and 32 + 4 g + i (hi); then 2 gp + 1
};

TROUPE_VNNI inline q6k_quants q6k_unpack_pair(__m512i v0, __m512i v1, __m512i tops) {
  const __m512i nibble = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
  auto join = [&](__m512i low4, __m512i top2) { return _mm512_ternarylogic_epi32(low4, top2, nibble, 0xe4); };  // nibble ? a : b
  return {join(v0, _mm512_and_si512(_mm512_slli_epi16(tops, 4), top)), join(_mm512_srli_epi16(v0, 4), _mm512_and_si512(_mm512_slli_epi16(tops, 2), top)),
          join(v1, _mm512_and_si512(tops, top)), join(_mm512_srli_epi16(v1, 4), _mm512_and_si512(_mm512_srli_epi16(tops, 2), top))};
}

// Q6_K records for NR rows: per chunk of 64 weights, four runs of 16 each with its own signed
// scale; the quants are the nibbles with two top bits each from their own area. Folded: each
// run's sum minus 32 times the run's activation sum, times the scale, is sumq - summ.
template <std::size_t NR>
TROUPE_VNNI void q6k_panel_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p, const float* bias,
                                float* y) {
  const std::size_t kb = w.blocks;
  const std::uint8_t* rec = w.data + p * kb * q6k_record_bytes;
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b, rec += q6k_record_bytes) {
    prefetch_ahead(rec, q6k_record_bytes);
    __m512i sum[NR];
    for (auto& v : sum) v = _mm512_setzero_si512();
    for (std::size_t c = 0; c < 4; ++c) {
      __m512i run[NR][4];
      for (auto& rr : run)
        for (auto& v : rr) v = _mm512_setzero_si512();
      for (std::size_t gp = 0; gp < 4; ++gp) {
        const q6k_quants u = q6k_unpack_pair(_mm512_loadu_si512(rec + 288 + (8 * c + 2 * gp) * 64),
                                             _mm512_loadu_si512(rec + 288 + (8 * c + 2 * gp + 1) * 64),
                                             _mm512_loadu_si512(rec + 2336 + (4 * c + gp) * 64));
        for (std::size_t k = 0; k < 2; ++k) {
          const std::size_t g = 2 * gp + k;
          const __m512i l = k == 0 ? u.lo0 : u.lo1, h = k == 0 ? u.hi0 : u.hi1;
          for (std::size_t r = 0; r < NR; ++r) {
            const std::int8_t* x = a.q + (r0 + r) * w.k + b * kquant_block + 64 * c + 4 * g;
            run[r][g / 4] = dot4(run[r][g / 4], l, x);
            run[r][2 + g / 4] = dot4(run[r][2 + g / 4], h, x + 32);
          }
        }
      }
      for (std::size_t q = 0; q < 4; ++q) {
        const std::size_t s = 4 * c + q;
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * s)));
        for (std::size_t r = 0; r < NR; ++r) {
          const std::int32_t xs = a.xsum[((r0 + r) * kb + b) * 16 + s];
          sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(_mm512_sub_epi32(run[r][q], _mm512_set1_epi32(32 * xs)), sc));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    for (std::size_t r = 0; r < NR; ++r)
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_mul_ps(d, _mm512_set1_ps(a.dx[(r0 + r) * kb + b])), facc[r]);
  }
  store_panel<NR>(facc, r0, w, p, bias, y);
}

// Q6_K for many rows (prefill, large batches): a panel's records are first unpacked into whole
// bytes, once, so the tile of rows does no bit work: per run of 16 weights it loads 4 vectors of
// quants and the run's 16 scales and takes each row's 4 dot products against them. Unpacking in
// the kernel above costs about as much as the dot products (10 operations per 2 vectors of
// quants, for 8 dot products at 4 rows) and its 16 run sums per row leave no registers for more
// rows. The integer sums and the float steps are the kernel above's, in its order: the results
// are bit for bit the same.
struct q6k_unpacked_block {
  __m512i q[16][4];  // run s, weights 16 s + 4 v + i of output j at byte 4 j + i of q[s][v]
  __m512i scale[16];  // run s's scale of each output, int32
  __m512 d;
};

TROUPE_VNNI void unpack_q6k_panel(const kquant_view& w, std::size_t p, q6k_unpacked_block* out) {
  const std::uint8_t* rec = w.data + p * w.blocks * q6k_record_bytes;
  for (std::size_t b = 0; b < w.blocks; ++b, rec += q6k_record_bytes) {
    q6k_unpacked_block& u = out[b];
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t gp = 0; gp < 4; ++gp) {
        const q6k_quants q = q6k_unpack_pair(_mm512_loadu_si512(rec + 288 + (8 * c + 2 * gp) * 64),
                                             _mm512_loadu_si512(rec + 288 + (8 * c + 2 * gp + 1) * 64),
                                             _mm512_loadu_si512(rec + 2336 + (4 * c + gp) * 64));
        for (std::size_t k = 0; k < 2; ++k) {  // group g's quants belong to runs 4 c + g / 4 (lo) and 4 c + 2 + g / 4 (hi)
          const std::size_t g = 2 * gp + k;
          u.q[4 * c + g / 4][g % 4] = k == 0 ? q.lo0 : q.lo1;
          u.q[4 * c + 2 + g / 4][g % 4] = k == 0 ? q.hi0 : q.hi1;
        }
      }
    for (std::size_t run = 0; run < 16; ++run)
      u.scale[run] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * run)));
    u.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
  }
}

template <std::size_t NR>
TROUPE_VNNI void q6k_unpacked_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p,
                                   const q6k_unpacked_block* blocks, const float* bias, float* y) {
  const std::size_t kb = w.blocks;
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b) {
    const q6k_unpacked_block& u = blocks[b];
    __m512i sum[NR];
    for (auto& v : sum) v = _mm512_setzero_si512();
    for (std::size_t run = 0; run < 16; ++run) {
      const __m512i w0 = u.q[run][0], w1 = u.q[run][1], w2 = u.q[run][2], w3 = u.q[run][3], sc = u.scale[run];
      for (std::size_t r = 0; r < NR; ++r) {
        const std::int8_t* x = a.q + (r0 + r) * w.k + b * kquant_block + 16 * run;
        __m512i acc = dot4(_mm512_setzero_si512(), w0, x);
        acc = dot4(acc, w1, x + 4);
        acc = dot4(acc, w2, x + 8);
        acc = dot4(acc, w3, x + 12);
        const std::int32_t xs = a.xsum[((r0 + r) * kb + b) * 16 + run];
        sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(_mm512_sub_epi32(acc, _mm512_set1_epi32(32 * xs)), sc));
      }
    }
    for (std::size_t r = 0; r < NR; ++r)
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_mul_ps(u.d, _mm512_set1_ps(a.dx[(r0 + r) * kb + b])), facc[r]);
  }
  store_panel<NR>(facc, r0, w, p, bias, y);
}

// A panel's Q6_K weights against rows [r_begin, r_end), through the unpacked bytes, 8 rows at a time.
TROUPE_VNNI void q6k_panel_unpacked(const kquant_acts& a, std::size_t r_begin, std::size_t r_end, const kquant_view& w, std::size_t p,
                                    const float* bias, float* y) {
  thread_local std::vector<q6k_unpacked_block> blocks;
  if (blocks.size() < w.blocks) blocks.resize(w.blocks);
  unpack_q6k_panel(w, p, blocks.data());
  constexpr std::size_t tile = 8;
  for (std::size_t r0 = r_begin; r0 < r_end; r0 += tile) switch (std::min(tile, r_end - r0)) {
      case 1: q6k_unpacked_rows<1>(a, r0, w, p, blocks.data(), bias, y); break;
      case 2: q6k_unpacked_rows<2>(a, r0, w, p, blocks.data(), bias, y); break;
      case 3: q6k_unpacked_rows<3>(a, r0, w, p, blocks.data(), bias, y); break;
      case 4: q6k_unpacked_rows<4>(a, r0, w, p, blocks.data(), bias, y); break;
      case 5: q6k_unpacked_rows<5>(a, r0, w, p, blocks.data(), bias, y); break;
      case 6: q6k_unpacked_rows<6>(a, r0, w, p, blocks.data(), bias, y); break;
      case 7: q6k_unpacked_rows<7>(a, r0, w, p, blocks.data(), bias, y); break;
      default: q6k_unpacked_rows<8>(a, r0, w, p, blocks.data(), bias, y); break;
    }
}

// IQ4_XS records: Q4_K's nibbles, each looked up in the table of levels + 128 (unsigned, as
// VNNI wants); folded, a sub-block's sum less 128 times its activations' sum, times its scale.
template <std::size_t NR>
TROUPE_VNNI void iq4xs_panel_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p, const float* bias,
                                  float* y) {
  const std::size_t kb = w.blocks;
  const std::uint8_t* rec = w.data + p * kb * iq4xs_record_bytes;
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(levels16());
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b, rec += iq4xs_record_bytes) {
    prefetch_ahead(rec, iq4xs_record_bytes);
    __m512i sum[NR];
    for (auto& v : sum) v = _mm512_setzero_si512();
    for (std::size_t c = 0; c < 4; ++c) {
      __m512i lo[NR], hi[NR];
      for (std::size_t r = 0; r < NR; ++r) lo[r] = hi[r] = _mm512_setzero_si512();
      for (std::size_t g = 0; g < 8; ++g) {
        const __m512i v = _mm512_loadu_si512(rec + 160 + (8 * c + g) * 64);
        const __m512i l = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
        const __m512i h = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        for (std::size_t r = 0; r < NR; ++r) {
          const std::int8_t* x = a.q + (r0 + r) * w.k + b * kquant_block + 64 * c + 4 * g;
          lo[r] = dot4(lo[r], l, x);
          hi[r] = dot4(hi[r], h, x + 32);
        }
      }
      auto scale = [&](std::size_t s) {
        return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + 16 * s)));
      };
      const __m512i sc_lo = scale(2 * c), sc_hi = scale(2 * c + 1);
      for (std::size_t r = 0; r < NR; ++r) {
        const std::int32_t* xs = a.xsum + ((r0 + r) * kb + b) * 16 + 4 * c;
        const __m512i tl = _mm512_sub_epi32(lo[r], _mm512_set1_epi32(128 * (xs[0] + xs[1])));
        const __m512i th = _mm512_sub_epi32(hi[r], _mm512_set1_epi32(128 * (xs[2] + xs[3])));
        sum[r] = _mm512_add_epi32(sum[r], _mm512_add_epi32(_mm512_mullo_epi32(tl, sc_lo), _mm512_mullo_epi32(th, sc_hi)));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    for (std::size_t r = 0; r < NR; ++r)
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_mul_ps(d, _mm512_set1_ps(a.dx[(r0 + r) * kb + b])), facc[r]);
  }
  store_panel<NR>(facc, r0, w, p, bias, y);
}

// Q5_K and IQ4_XS (and Q4_K, which gains nothing: unpack_from_rows) for many rows, as Q6_K
// above: a panel's records unpacked once into
// whole bytes (the quants of vector j are weights 4 j .. 4 j + 3 of each output; IQ4_XS's
// already looked up, plus 128), its scales and mins into int32 lanes, then 8 rows at a time
// with no bit work and one register of weights live (each vector meets the 8 rows in turn). The
// integer sums and float steps are the panel kernels' above, in their order.
struct k32_unpacked_block {
  __m512i q[64];
  __m512i scale[8];  // of sub-block s (32 weights), int32
  __m512i min_pairs[4];  // the mins of sub-blocks 2 t and 2 t + 1 as int16 pairs (unused for IQ4_XS)
  __m512 d, dmin;
};

template <kquant_type T>
TROUPE_VNNI void unpack_k32_panel(const kquant_view& w, std::size_t p, k32_unpacked_block* out) {
  constexpr bool iq4 = T == kquant_type::iq4_xs, five = T == kquant_type::q5_k;
  constexpr std::size_t rb = iq4 ? iq4xs_record_bytes : five ? q5k_record_bytes : q4k_record_bytes, quants = iq4 ? 160 : 320;
  const __m512i low = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(0x01);
  const __m512i table = _mm512_broadcast_i32x4(levels16());
  const std::uint8_t* rec = w.data + p * w.blocks * rb;
  for (std::size_t b = 0; b < w.blocks; ++b, rec += rb) {
    k32_unpacked_block& u = out[b];
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t g = 0; g < 8; ++g) {
        const __m512i v = _mm512_loadu_si512(rec + quants + (8 * c + g) * 64);
        __m512i l = _mm512_and_si512(v, low), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        if constexpr (five) {  // as q4k_panel_rows<NR, true>
          const __m512i f = _mm512_loadu_si512(rec + 2368 + (2 * c + g / 4) * 64);
          const __m512i at = _mm512_srl_epi16(f, _mm_cvtsi32_si128(int(2 * (g % 4))));
          l = _mm512_or_si512(l, _mm512_slli_epi16(_mm512_and_si512(at, one), 4));
          h = _mm512_or_si512(h, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(at, 1), one), 4));
        }
        if constexpr (iq4) l = _mm512_shuffle_epi8(table, l), h = _mm512_shuffle_epi8(table, h);
        u.q[16 * c + g] = l;
        u.q[16 * c + 8 + g] = h;
      }
    for (std::size_t sb = 0; sb < 8; ++sb) {
      const __m128i* at = reinterpret_cast<const __m128i*>(rec + (iq4 ? 32 : 64) + 16 * sb);
      u.scale[sb] = iq4 ? _mm512_cvtepi8_epi32(_mm_loadu_si128(at)) : _mm512_cvtepu8_epi32(_mm_loadu_si128(at));
    }
    if constexpr (!iq4)
      for (std::size_t t = 0; t < 4; ++t) {
        auto min_of = [&](std::size_t sb) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 192 + 16 * sb))); };
        u.min_pairs[t] = _mm512_or_si512(min_of(2 * t), _mm512_slli_epi32(min_of(2 * t + 1), 16));
      }
    u.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    if constexpr (!iq4) u.dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
  }
}

// The activation sums of each row's sub-blocks of 32 as int16 pairs (sub-blocks 2 t, 2 t + 1; at
// most 32 x 127 each), for one vpdpwssd per pair of mins: `pairs[(r * blocks + b) * 4 + t]`.
inline void sub_block_sum_pairs(const kquant_acts& a, std::size_t r_begin, std::size_t r_end, std::size_t blocks,
                                std::vector<std::int32_t>& pairs) {
  pairs.resize(r_end * blocks * 4);
  for (std::size_t i = r_begin * blocks; i < r_end * blocks; ++i)
    for (std::size_t t = 0; t < 4; ++t) {
      const std::int32_t* xs = a.xsum + i * 16 + 4 * t;
      pairs[i * 4 + t] = std::int32_t(std::uint32_t(std::uint16_t(xs[0] + xs[1])) | std::uint32_t(std::uint16_t(xs[2] + xs[3])) << 16);
    }
}

template <kquant_type T, std::size_t NR>
TROUPE_VNNI void k32_unpacked_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p,
                                   const k32_unpacked_block* blocks, const std::int32_t* xs_pairs, const float* bias, float* y) {
  constexpr bool folded = T == kquant_type::iq4_xs;
  const std::size_t kb = w.blocks;
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b) {
    const k32_unpacked_block& u = blocks[b];
    __m512i sumq[NR];
    for (auto& v : sumq) v = _mm512_setzero_si512();
    for (std::size_t sb = 0; sb < 8; ++sb) {
      __m512i acc[NR];
      for (auto& v : acc) v = _mm512_setzero_si512();
      for (std::size_t j = 0; j < 8; ++j) {
        const __m512i q = u.q[8 * sb + j];
        for (std::size_t r = 0; r < NR; ++r) acc[r] = dot4(acc[r], q, a.q + (r0 + r) * w.k + b * kquant_block + 32 * sb + 4 * j);
      }
      for (std::size_t r = 0; r < NR; ++r) {
        if constexpr (folded) {
          const std::int32_t* xs = a.xsum + ((r0 + r) * kb + b) * 16 + 2 * sb;
          acc[r] = _mm512_sub_epi32(acc[r], _mm512_set1_epi32(128 * (xs[0] + xs[1])));
        }
        sumq[r] = _mm512_add_epi32(sumq[r], _mm512_mullo_epi32(acc[r], u.scale[sb]));
      }
    }
    for (std::size_t r = 0; r < NR; ++r) {
      const __m512 dx = _mm512_set1_ps(a.dx[(r0 + r) * kb + b]);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumq[r]), _mm512_mul_ps(u.d, dx), facc[r]);
      if constexpr (!folded) {
        const std::int32_t* xp = xs_pairs + ((r0 + r) * kb + b) * 4;
        __m512i summ = _mm512_setzero_si512();
        for (std::size_t t = 0; t < 4; ++t) summ = _mm512_dpwssd_epi32(summ, u.min_pairs[t], _mm512_set1_epi32(xp[t]));
        const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(u.dmin, dx)), _mm512_set1_epi32(int(0x80000000u))));
        facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), neg, facc[r]);
      }
    }
  }
  store_panel<NR>(facc, r0, w, p, bias, y);
}

// `pairs`: sub_block_sum_pairs of these rows (Q4_K, Q5_K).
template <kquant_type T>
TROUPE_VNNI void k32_panel_unpacked(const kquant_acts& a, std::size_t r_begin, std::size_t r_end, const kquant_view& w, std::size_t p,
                                    const std::vector<std::int32_t>& pairs, const float* bias, float* y) {
  thread_local std::vector<k32_unpacked_block> blocks;
  if (blocks.size() < w.blocks) blocks.resize(w.blocks);
  unpack_k32_panel<T>(w, p, blocks.data());
  constexpr std::size_t tile = 8;
  for (std::size_t r0 = r_begin; r0 < r_end; r0 += tile) switch (std::min(tile, r_end - r0)) {
      case 1: k32_unpacked_rows<T, 1>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 2: k32_unpacked_rows<T, 2>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 3: k32_unpacked_rows<T, 3>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 4: k32_unpacked_rows<T, 4>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 5: k32_unpacked_rows<T, 5>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 6: k32_unpacked_rows<T, 6>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      case 7: k32_unpacked_rows<T, 7>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
      default: k32_unpacked_rows<T, 8>(a, r0, w, p, blocks.data(), pairs.data(), bias, y); break;
    }
}

template <kquant_type T, std::size_t NR>
TROUPE_VNNI void panel_rows(const kquant_acts& a, std::size_t r0, const kquant_view& w, std::size_t p, const float* bias, float* y) {
  if constexpr (T == kquant_type::q4_k)
    q4k_panel_rows<NR>(a, r0, w, p, bias, y);
  else if constexpr (T == kquant_type::q5_k)
    q4k_panel_rows<NR, true>(a, r0, w, p, bias, y);
  else if constexpr (T == kquant_type::iq4_xs)
    iq4xs_panel_rows<NR>(a, r0, w, p, bias, y);
  else
    q6k_panel_rows<NR>(a, r0, w, p, bias, y);
}

// From how many rows a panel is unpacked first: where unpacking it once costs less than the bit
// work the tiles of 4 rows would do. 5632 x 2048 on the EPYC, GMAC/s at 16 / 64 / 512 rows, in
// panels -> unpacked: Q6_K (from 8 rows: 246 -> 254) 314-357 / 360-386 / 362-411 -> 338-367 /
// 395-443 / 419-442; Q5_K 347-353 / 330-341 / 316-322 -> 391-411 / 424-427 / 431-456; IQ4_XS (8
// rows: 372-403 -> 328-356) 418-437 / 392-436 / 409-426 -> 418-447 / 440-489 / 476-497. Q4_K,
// whose bit work is one mask and one shift per vector, gains nothing (431-454 / 424-448 /
// 433-443 -> 396-425 / 413-438 / 422-469) and stays in panels.
template <kquant_type T>
constexpr std::size_t unpack_from_rows() {
  return T == kquant_type::q6_k ? 8 : T == kquant_type::q4_k ? std::size_t(-1) : 16;
}

// Rows are taken in blocks whose activations stay in L2 (256 KiB of quants, at least a tile of 8
// rows) while every panel of the task passes over them: at 512 rows of 2,048 the whole 1 MiB of
// activations came from L3 again for each panel, and the Q4_K kernel ran at 344 GMAC/s in a
// prefill against 437 on 64 rows. The weights are read once per block of rows instead.
inline std::size_t rows_per_block(std::size_t k) { return std::max<std::size_t>(8, (std::size_t(256) << 10) / k / 8 * 8); }

template <kquant_type T>
TROUPE_VNNI void panels_of(const kquant_acts& a, std::size_t rows, const kquant_view& w, std::size_t c0, std::size_t c1,
                           const float* bias, float* y) {
  constexpr std::size_t tile = 4;
  const std::size_t block = rows_per_block(w.k);
  thread_local std::vector<std::int32_t> pairs;
  for (std::size_t b0 = 0; b0 < rows; b0 += block) {
    const std::size_t b1 = std::min(rows, b0 + block);
    const bool unpack = b1 - b0 >= unpack_from_rows<T>();
    if (unpack && T == kquant_type::q5_k) sub_block_sum_pairs(a, b0, b1, w.blocks, pairs);
    for (std::size_t p = c0 / kquant_panel; p * kquant_panel < c1; ++p) {
      if (unpack) {
        if constexpr (T == kquant_type::q6_k) q6k_panel_unpacked(a, b0, b1, w, p, bias, y);
        else if constexpr (T != kquant_type::q4_k) k32_panel_unpacked<T>(a, b0, b1, w, p, pairs, bias, y);
        continue;
      }
      for (std::size_t r0 = b0; r0 < b1; r0 += tile) switch (std::min(tile, b1 - r0)) {
          case 1: panel_rows<T, 1>(a, r0, w, p, bias, y); break;
          case 2: panel_rows<T, 2>(a, r0, w, p, bias, y); break;
          case 3: panel_rows<T, 3>(a, r0, w, p, bias, y); break;
          default: panel_rows<T, 4>(a, r0, w, p, bias, y); break;
        }
    }
  }
}

}  // namespace
#endif

TROUPE_VNNI void kquant_task(const kquant_acts& a, std::size_t rows, const kquant_view& w, std::size_t c0, std::size_t c1, const float* bias,
                             float* y) {
#if defined(__AVX512F__)
  // c0, c1: whole panels (stream_split by 16)
  switch (w.type) {
    case kquant_type::q4_k: return panels_of<kquant_type::q4_k>(a, rows, w, c0, c1, bias, y);
    case kquant_type::q5_k: return panels_of<kquant_type::q5_k>(a, rows, w, c0, c1, bias, y);
    case kquant_type::q6_k: return panels_of<kquant_type::q6_k>(a, rows, w, c0, c1, bias, y);
    case kquant_type::iq4_xs: return panels_of<kquant_type::iq4_xs>(a, rows, w, c0, c1, bias, y);
    default: break;  // Q3_K, Q2_K: the rows below
  }
#endif
  const bool folded = kquant_folded(w.type);
  const std::size_t bb = kquant_block_bytes(w.type), row_bytes = w.blocks * bb;
  thread_local std::vector<float> acc;
  kquant_unpacked u[tile_outputs];
  for (std::size_t c = c0; c < c1; c += tile_outputs) {
    const std::size_t nt = std::min(tile_outputs, c1 - c);
    acc.assign(rows * tile_outputs, 0.0f);
    if (nt < tile_outputs) std::memset(static_cast<void*>(u + nt), 0, (tile_outputs - nt) * sizeof(kquant_unpacked));
    for (std::size_t b = 0; b < w.blocks; ++b) {
      alignas(16) float d[tile_outputs] = {}, dmin[tile_outputs] = {};
      for (std::size_t j = 0; j < nt; ++j) {
        const std::size_t out = c + j;
        if (kquant_panelled(w.type))
          unpack_kquant_record(w.type, w.data + ((out / kquant_panel) * w.blocks + b) * kquant_record_bytes(w.type),
                               out % kquant_panel, u[j]);
        else
          unpack(w.type, w.data + out * row_bytes + b * bb, u[j]);
        d[j] = u[j].d, dmin[j] = u[j].dmin;
      }
#if defined(__AVX2__)
      const __m128 vd = _mm_load_ps(d), vdmin = _mm_load_ps(dmin);
#else
      const float* vd = d;
      const float* vdmin = dmin;
#endif
      for (std::size_t r = 0; r < rows; ++r)
        tile_row(u, a.q + r * w.k + b * kquant_block, a.xsum + (r * w.blocks + b) * 16, a.dx[r * w.blocks + b], folded, vd, vdmin,
                 acc.data() + r * tile_outputs);
    }
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < nt; ++j) {
        const float v = acc[r * tile_outputs + j];
        y[r * w.n + c + j] = bias ? v + bias[c + j] : v;
      }
  }
}

}  // namespace troupe::kernels::TROUPE_ISA
