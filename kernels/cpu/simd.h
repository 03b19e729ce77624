// A 16-float "panel" vector for the kernels that are compiled once per ISA (see isa_variants.cmake).
//
// Every operation here rounds exactly as its scalar definition does (fma is one rounding, the
// horizontal sum is a fixed tree), so the scalar, AVX2 and AVX-512 builds of a kernel give
// bitwise-identical results. Keep standard-library templates out of those translation units:
// they would be instantiated with ISA-specific code and could be picked by the linker for
// callers on CPUs without it.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/cpu/dtype.h"

#ifndef TROUPE_ISA
#error "simd.h is only for translation units compiled per ISA (TROUPE_ISA must be defined)"
#endif

namespace troupe::kernels::TROUPE_ISA {

constexpr int panel = 16;

#if defined(__AVX512F__)

struct vec16 { __m512 v; };
inline vec16 zero16() { return {_mm512_setzero_ps()}; }
inline vec16 splat16(float x) { return {_mm512_set1_ps(x)}; }
inline vec16 load16(const float* p) { return {_mm512_loadu_ps(p)}; }
inline vec16 load16(const std::uint16_t* p, dtype t) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (t == dtype::f16) return {_mm512_cvtph_ps(h)};
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline vec16 load16_i8(const std::int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
inline void store16(float* p, vec16 a) { _mm512_storeu_ps(p, a.v); }
inline vec16 fma16(vec16 a, vec16 b, vec16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline vec16 mul16(vec16 a, vec16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline vec16 div16(vec16 a, vec16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline vec16 add16(vec16 a, vec16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline float hsum16(vec16 a) {
  __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(a.v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
  __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  __m128 h1 = _mm_add_ss(h2, _mm_movehdup_ps(h2));
  return _mm_cvtss_f32(h1);
}

inline vec16 max16(vec16 a, vec16 b) { return {_mm512_max_ps(a.v, b.v)}; }
// 2^n for integer-valued n in [-126, 127].
inline vec16 pow2i16(vec16 n) {
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23))};
}

// out lane j = hsum16(d[j]), by the same addition tree as hsum16 but 16 sums at a time.
inline vec16 hsum16x16(const vec16* d) {
  __m512 t[8], u[4], v[2];
  for (int m = 0; m < 8; ++m) {  // lanes i + i+8: key 2m in 128-bit lanes 0-1, key 2m+1 in 2-3
    __m512 a = d[2 * m].v, b = d[2 * m + 1].v;
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  for (int m = 0; m < 4; ++m)  // i + i+4: 128-bit lane L holds key 4m + L
    u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], 0xDD));
  for (int m = 0; m < 2; ++m)  // i + i+2: lane L holds keys 8m + L and 8m + 4 + L
    v[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0x44), _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0xEE));
  // i + i+1: element 4L + e holds key 4e + L; put key j in lane j.
  __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return {_mm512_permutexvar_ps(order, w)};
}

#elif defined(__AVX2__)

struct vec16 { __m256 lo, hi; };
inline vec16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline vec16 splat16(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline vec16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline __m256 widen8(const std::uint16_t* p, dtype t) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == dtype::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline vec16 load16(const std::uint16_t* p, dtype t) { return {widen8(p, t), widen8(p + 8, t)}; }
inline vec16 load16_i8(const std::int8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)))};
}
inline void store16(float* p, vec16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
inline vec16 fma16(vec16 a, vec16 b, vec16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline vec16 mul16(vec16 a, vec16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline vec16 div16(vec16 a, vec16 b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline vec16 add16(vec16 a, vec16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline float hsum16(vec16 a) {
  __m256 h8 = _mm256_add_ps(a.lo, a.hi);
  __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  __m128 h1 = _mm_add_ss(h2, _mm_movehdup_ps(h2));
  return _mm_cvtss_f32(h1);
}

inline vec16 max16(vec16 a, vec16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline __m256 pow2i8(__m256 n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vec16 pow2i16(vec16 n) { return {pow2i8(n.lo), pow2i8(n.hi)}; }

#else

struct vec16 { float v[16]; };
inline vec16 zero16() { return vec16{}; }
inline vec16 splat16(float x) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = x;
  return r;
}
inline vec16 load16(const float* p) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = p[i];
  return r;
}
inline vec16 load16(const std::uint16_t* p, dtype t) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = t == dtype::f16 ? f16_to_f32(p[i]) : bf16_to_f32(p[i]);
  return r;
}
inline vec16 load16_i8(const std::int8_t* p) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = float(p[i]);
  return r;
}
inline void store16(float* p, vec16 a) {
  for (int i = 0; i < 16; ++i) p[i] = a.v[i];
}
inline vec16 fma16(vec16 a, vec16 b, vec16 c) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline vec16 mul16(vec16 a, vec16 b) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] * b.v[i];
  return r;
}
inline vec16 div16(vec16 a, vec16 b) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] / b.v[i];
  return r;
}
inline vec16 add16(vec16 a, vec16 b) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}
// Same tree as the vector builds: halves of 8, then 4, then 2, then 1.
inline float hsum16(vec16 a) {
  float h8[8], h4[4];
  for (int i = 0; i < 8; ++i) h8[i] = a.v[i] + a.v[i + 8];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i] + h8[i + 4];
  float h2a = h4[0] + h4[2], h2b = h4[1] + h4[3];
  return h2a + h2b;
}

inline vec16 max16(vec16 a, vec16 b) {
  vec16 r;
  for (int i = 0; i < 16; ++i) r.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
  return r;
}
inline vec16 pow2i16(vec16 n) {
  vec16 r;
  for (int i = 0; i < 16; ++i) {
    std::uint32_t bits = std::uint32_t(int(n.v[i]) + 127) << 23;
    std::memcpy(&r.v[i], &bits, 4);
  }
  return r;
}

#endif

// e^x for x <= 0 (softmax weights), from the same IEEE operations on every ISA so the bits
// agree: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 Taylor polynomial (relative error
// below 2e-7), times 2^n. Inputs below -87 give e^-87 (about 1.6e-38), not 0.
inline vec16 exp16(vec16 x) {
  x = max16(x, splat16(-87.0f));
  const vec16 magic = splat16(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  vec16 n = add16(fma16(x, splat16(1.44269504f), magic), splat16(-12582912.0f));
  vec16 r = fma16(n, splat16(-0.693145752f), x);  // ln 2 split in two for an exact first step
  r = fma16(n, splat16(-1.42860677e-06f), r);
  vec16 p = splat16(1.0f / 720);
  p = fma16(p, r, splat16(1.0f / 120));
  p = fma16(p, r, splat16(1.0f / 24));
  p = fma16(p, r, splat16(1.0f / 6));
  p = fma16(p, r, splat16(0.5f));
  p = fma16(p, r, splat16(1.0f));
  p = fma16(p, r, splat16(1.0f));
  return mul16(p, pow2i16(n));
}

// tanh(x) for any x from one exp16: with e = e^-2|x|, tanh(|x|) = (1 - e) / (1 + e), and the
// sign put back by x / max(|x|, tiny) (exactly +-1, or a fraction where |x| is below 1e-30 and the
// result is that small anyway). Absolute error about 1e-7; the same IEEE steps on every ISA.
inline vec16 tanh16(vec16 x) {
  const vec16 minus = splat16(-1.0f), one = splat16(1.0f);
  const vec16 mag = max16(x, mul16(x, minus));
  const vec16 e = exp16(mul16(mag, splat16(-2.0f)));
  const vec16 sign = div16(x, max16(mag, splat16(1e-30f)));
  return mul16(div16(add16(one, mul16(e, minus)), add16(one, e)), sign);
}

// o[i] = f(a[i], b[i]) for n elements, 16 at a time; the tail goes through the same vector steps
// (zero-padded), so an element's bits do not depend on where it sits (the gated MLPs' activations).
template <class F>
inline void map16(const float* a, const float* b, std::size_t n, float* o, F f) {
  std::size_t i = 0;
  for (; i + panel <= n; i += panel) store16(o + i, f(load16(a + i), load16(b + i)));
  if (i == n) return;
  float at[panel] = {}, bt[panel] = {}, ot[panel];
  for (std::size_t j = i; j < n; ++j) at[j - i] = a[j], bt[j - i] = b[j];
  store16(ot, f(load16(at), load16(bt)));
  for (std::size_t j = i; j < n; ++j) o[j] = ot[j - i];
}

#if !defined(__AVX512F__)
// out lane j = hsum16(d[j]).
inline vec16 hsum16x16(const vec16* d) {
  float out[16];
  for (int j = 0; j < 16; ++j) out[j] = hsum16(d[j]);
  return load16(out);
}
#endif

// Loads 16 elements of a buffer whose element type is only known at run time.
inline vec16 load16_any(const void* p, dtype t) {
  if (t == dtype::f32) return load16(static_cast<const float*>(p));
  return load16(static_cast<const std::uint16_t*>(p), t);
}

}  // namespace troupe::kernels::TROUPE_ISA
