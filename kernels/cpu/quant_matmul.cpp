// The int8 matmul over packed quantized weights (see quant_weight.h for the arithmetic every
// ISA must reproduce bit for bit), compiled once per ISA like gemm/gemv.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant_weight.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace troupe::kernels::TROUPE_ISA {

namespace {

// The outputs of one panel for one row: acc (16 lanes) scaled, biased and stored.
void finish_row(const quant_view& w, std::size_t p, const float* acc, const float* bias, float* y) {
  for (std::size_t j = 0; j < quant_panel; ++j) {
    const std::size_t out = p * quant_panel + j;
    if (out >= w.n) break;
    float v = acc[j];
    if (w.type == quant_type::int8) v = v * w.channel_scale[out];
    if (bias) v = v + bias[out];
    y[out] = v;
  }
}

[[maybe_unused]] std::int32_t load4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#if defined(__AVX512F__)
#define TROUPE_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
// Records asked for ahead of the one being read. One core's stream can outrun its hardware
// prefetcher at batch 1 (on an Intel Xeon this took decode from 58% to 67% of the roofline), and
// with neighbours loading the memory system more requests in flight read more.
constexpr std::size_t prefetch_records = 16;

TROUPE_VNNI inline void prefetch_ahead(const std::uint8_t* rec, std::size_t rb) {
  for (std::size_t off = 0; off < rb; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(rec + prefetch_records * rb + off), _MM_HINT_T0);
}
constexpr std::size_t tile_rows = 8;

// One record's dot products for NR rows (a compile-time count and type, so every accumulator
// stays in a register and no per-block branch is left: with a run-time row count the compiler
// kept them on the stack), then one fma per row into facc. Integer sums are exact in any order,
// so the chains below may be split freely: a lone row of q8_0/int8 takes four, so its dot
// products do not wait on each other.
template <quant_type T, std::size_t NR>
TROUPE_VNNI inline void record_rows(const std::uint8_t* rec, const quant_acts& a, std::size_t r0, std::size_t k,
                                    std::size_t kb, std::size_t b, __m512* facc) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512i isum[NR];
  if constexpr (T == quant_type::q4_0) {
    for (auto& s : isum) s = _mm512_setzero_si512();
    for (std::size_t h = 0; h < 4; ++h) {
      const __m512i v = _mm512_loadu_si512(rec + 32 + h * 64);
      const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      for (std::size_t r = 0; r < NR; ++r) {
        const std::int8_t* xq = a.q + (r0 + r) * k + b * quant_block;
        isum[r] = _mm512_dpbusd_epi32(isum[r], lo, _mm512_set1_epi32(load4(xq + 4 * h)));
        isum[r] = _mm512_dpbusd_epi32(isum[r], hi, _mm512_set1_epi32(load4(xq + 16 + 4 * h)));
      }
    }
    for (std::size_t r = 0; r < NR; ++r) isum[r] = _mm512_sub_epi32(isum[r], _mm512_set1_epi32(a.offset[(r0 + r) * kb + b]));
  } else {  // signed weights: dot(x + 128, w) - 128 * sum(w), x + 128 being unsigned
    constexpr std::size_t C = NR == 1 ? 4 : 1;
    const std::uint8_t* base = rec + (T == quant_type::q8_0 ? 32 : 0);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i wsum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i acc[NR][C];
    for (auto& row : acc)
      for (auto& c : row) c = _mm512_setzero_si512();
    for (std::size_t g = 0; g < 8; ++g) {
      const __m512i v = _mm512_loadu_si512(base + g * 64);
      wsum[g & 1] = _mm512_dpbusd_epi32(wsum[g & 1], ones, v);
      for (std::size_t r = 0; r < NR; ++r) {
        const std::int8_t* xb = a.biased + (r0 + r) * k + b * quant_block;
        acc[r][g % C] = _mm512_dpbusd_epi32(acc[r][g % C], _mm512_set1_epi32(load4(xb + 4 * g)), v);
      }
    }
    const __m512i off = _mm512_slli_epi32(_mm512_add_epi32(wsum[0], wsum[1]), 7);
    for (std::size_t r = 0; r < NR; ++r) {
      isum[r] = acc[r][0];
      if constexpr (C == 4) isum[r] = _mm512_add_epi32(_mm512_add_epi32(acc[r][0], acc[r][1]), _mm512_add_epi32(acc[r][2], acc[r][3]));
      isum[r] = _mm512_sub_epi32(isum[r], off);
    }
  }
  const __m512 dw = T == quant_type::int8 ? _mm512_set1_ps(1.0f)
                                          : _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec)));
  for (std::size_t r = 0; r < NR; ++r) {
    const __m512 dx = _mm512_set1_ps(a.scale[(r0 + r) * kb + b]);
    const __m512 d = T == quant_type::int8 ? dx : _mm512_mul_ps(dw, dx);
    facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), d, facc[r]);
  }
}

template <quant_type T, std::size_t NR>
TROUPE_VNNI void panel_rows_t(const quant_acts& a, std::size_t r0, const quant_view& w, std::size_t p, const float* bias,
                              float* y) {
  constexpr std::size_t rb = quant_record_bytes(T);
  const std::size_t kb = w.blocks;
  __m512 facc[NR];
  for (auto& f : facc) f = _mm512_setzero_ps();
  const std::uint8_t* rec = w.data + p * kb * rb;
  for (std::size_t b = 0; b < kb; ++b, rec += rb) {
    prefetch_ahead(rec, rb);
    record_rows<T, NR>(rec, a, r0, w.k, kb, b, facc);
  }
  alignas(64) float out[quant_panel];
  for (std::size_t r = 0; r < NR; ++r) {
    _mm512_store_ps(out, facc[r]);
    finish_row(w, p, out, bias, y + (r0 + r) * w.n);
  }
}

// Broadcasts the 4 quants at x into every lane and adds their dot products with w's 4 bytes
// per lane to acc. Written as one instruction with an embedded broadcast, which GCC does not
// fold from the intrinsics: at batch 1 the kernel is bound by instructions per weight byte.
TROUPE_VNNI inline __m512i dot4_bcast(__m512i acc, __m512i w, const std::int8_t* x) {
#if defined(__GNUC__) && !defined(__clang__)
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const std::int32_t*>(x)));
  return acc;
#else
  return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(load4(x)));
#endif
}

// Batch 1 of q4_0, the decode case, for P consecutive panels at once: pointers walked instead
// of recomputed, two chains per panel (low nibbles, and high nibbles used in place as 16 times
// the quant, shifted back once per block). Each output still takes its blocks in order.
template <std::size_t P>
TROUPE_VNNI void panel_q4_0_row(const quant_acts& a, std::size_t r, const quant_view& w, std::size_t p, const float* bias,
                                float* y) {
  constexpr std::size_t rb = quant_record_bytes(quant_type::q4_0);
  const std::size_t kb = w.blocks, stride = kb * rb;
  const std::uint8_t* rec = w.data + p * stride;
  const std::int8_t* xq = a.q + r * w.k;
  const float* dx = a.scale + r * kb;
  const std::int32_t* offset = a.offset + r * kb;
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 facc[P];
  for (auto& f : facc) f = _mm512_setzero_ps();
  for (std::size_t b = 0; b < kb; ++b, rec += rb, xq += quant_block) {
    for (std::size_t i = 0; i < P; ++i) prefetch_ahead(rec + i * stride, rb);
    __m512i lo[P], hi[P];
    for (std::size_t i = 0; i < P; ++i) lo[i] = hi[i] = _mm512_setzero_si512();
    for (std::size_t h = 0; h < 4; ++h)
      for (std::size_t i = 0; i < P; ++i) {
        const __m512i v = _mm512_loadu_si512(rec + i * stride + 32 + h * 64);
        lo[i] = dot4_bcast(lo[i], _mm512_and_si512(v, low), xq + 4 * h);
        hi[i] = dot4_bcast(hi[i], _mm512_andnot_si512(low, v), xq + 16 + 4 * h);
      }
    const __m512i off = _mm512_set1_epi32(offset[b]);
    const __m512 vdx = _mm512_set1_ps(dx[b]);
    for (std::size_t i = 0; i < P; ++i) {
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(lo[i], _mm512_srai_epi32(hi[i], 4)), off);
      const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + i * stride)));
      facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, vdx), facc[i]);
    }
  }
  alignas(64) float out[quant_panel];
  for (std::size_t i = 0; i < P; ++i) {
    _mm512_store_ps(out, facc[i]);
    finish_row(w, p + i, out, bias, y + r * w.n);
  }
}

template <quant_type T, std::size_t... NR>
void panel_rows_n(std::index_sequence<NR...>, const quant_acts& a, std::size_t r0, std::size_t nr, const quant_view& w,
                  std::size_t p, const float* bias, float* y) {
  ((nr == NR + 1 ? panel_rows_t<T, NR + 1>(a, r0, w, p, bias, y) : void()), ...);
}

void panel_rows(const quant_acts& a, std::size_t r0, std::size_t nr, const quant_view& w, std::size_t p, const float* bias,
                float* y) {
  constexpr auto rows = std::make_index_sequence<tile_rows>();
  switch (w.type) {
    case quant_type::q4_0: return panel_rows_n<quant_type::q4_0>(rows, a, r0, nr, w, p, bias, y);
    case quant_type::q8_0: return panel_rows_n<quant_type::q8_0>(rows, a, r0, nr, w, p, bias, y);
    case quant_type::int8: return panel_rows_n<quant_type::int8>(rows, a, r0, nr, w, p, bias, y);
  }
}

#elif defined(__AVX2__)
constexpr std::size_t tile_rows = 4;

void panel_rows(const quant_acts& a, std::size_t r0, std::size_t nr, const quant_view& w, std::size_t p, const float* bias,
                float* y) {
  const std::size_t kb = w.k / quant_block, rb = quant_record_bytes(w.type);
  const __m256i ones16 = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0f);
  alignas(32) float out[tile_rows][quant_panel];
  for (std::size_t half = 0; half < 2; ++half) {
    __m256 facc[tile_rows];
    for (auto& f : facc) f = _mm256_setzero_ps();
    for (std::size_t b = 0; b < kb; ++b) {
      const std::uint8_t* rec = w.data + (p * w.blocks + b) * rb;
      __m256i acc[tile_rows][2];  // two chains per row (exact integer sums)
      for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
      if (w.type == quant_type::q4_0) {
        for (std::size_t h = 0; h < 4; ++h) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 + h * 64 + half * 32));
          const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
          for (std::size_t r = 0; r < nr; ++r) {
            const std::int8_t* xq = a.q + (r0 + r) * w.k + b * quant_block;
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xq + 4 * h)));
            const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xq + 16 + 4 * h)));
            acc[r][h & 1] = _mm256_add_epi32(acc[r][h & 1], _mm256_madd_epi16(_mm256_add_epi16(pl, ph), ones16));
          }
        }
        for (std::size_t r = 0; r < nr; ++r)
          acc[r][0] = _mm256_sub_epi32(acc[r][0], _mm256_set1_epi32(a.offset[(r0 + r) * kb + b]));
      } else {  // |w| * (x * sign(w)): both factors fit maddubs without saturating
        const std::uint8_t* base = rec + (w.type == quant_type::q8_0 ? 32 : 0);
        for (std::size_t g = 0; g < 8; ++g) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + g * 64 + half * 32));
          const __m256i av = _mm256_abs_epi8(v);
          for (std::size_t r = 0; r < nr; ++r) {
            const std::int8_t* xq = a.q + (r0 + r) * w.k + b * quant_block;
            const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(load4(xq + 4 * g)), v);
            acc[r][g & 1] = _mm256_add_epi32(acc[r][g & 1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, sx), ones16));
          }
        }
      }
      const __m256 dw = w.type == quant_type::int8
                            ? _mm256_set1_ps(1.0f)
                            : _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + half * 16)));
      for (std::size_t r = 0; r < nr; ++r) {
        const __m256 dx = _mm256_set1_ps(a.scale[(r0 + r) * kb + b]);
        const __m256 d = w.type == quant_type::int8 ? dx : _mm256_mul_ps(dw, dx);
        facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc[r][0], acc[r][1])), d, facc[r]);
      }
    }
    for (std::size_t r = 0; r < nr; ++r) _mm256_store_ps(out[r] + half * 8, facc[r]);
  }
  for (std::size_t r = 0; r < nr; ++r) finish_row(w, p, out[r], bias, y + (r0 + r) * w.n);
}

#else
constexpr std::size_t tile_rows = 1;

void panel_rows(const quant_acts& a, std::size_t r0, std::size_t, const quant_view& w, std::size_t p, const float* bias,
                float* y) {
  const std::size_t kb = w.k / quant_block, rb = quant_record_bytes(w.type);
  const std::int8_t* x = a.q + r0 * w.k;
  float out[quant_panel];
  for (std::size_t j = 0; j < quant_panel; ++j) {
    float acc = 0;
    for (std::size_t b = 0; b < kb; ++b) {
      const std::uint8_t* rec = w.data + (p * w.blocks + b) * rb;
      const std::int8_t* xb = x + b * quant_block;
      std::int32_t isum = 0;
      if (w.type == quant_type::q4_0) {
        for (std::size_t h = 0; h < 4; ++h)
          for (std::size_t i = 0; i < 4; ++i) {
            const std::uint8_t q = rec[32 + h * 64 + j * 4 + i];
            isum += (int(q & 0x0f) - 8) * xb[4 * h + i] + (int(q >> 4) - 8) * xb[16 + 4 * h + i];
          }
      } else {
        const std::uint8_t* base = rec + (w.type == quant_type::q8_0 ? 32 : 0);
        for (std::size_t g = 0; g < 8; ++g)
          for (std::size_t i = 0; i < 4; ++i) isum += int(std::int8_t(base[g * 64 + j * 4 + i])) * xb[4 * g + i];
      }
      const float dx = a.scale[r0 * kb + b];
      std::uint16_t h = 0;
      if (w.type != quant_type::int8) std::memcpy(&h, rec + 2 * j, 2);
      const float d = w.type == quant_type::int8 ? dx : f16_to_f32(h) * dx;
      acc = std::fma(float(isum), d, acc);
    }
    out[j] = acc;
  }
  finish_row(w, p, out, bias, y + r0 * w.n);
}
#endif

}  // namespace

// quantize_activations' figures for one row, with each block's offset (8 * sum) and, where
// `biased` is not null, the x + 128 bytes. Bit for bit the scalar arithmetic: the same max, the
// same scalar scale and inverse, one multiply per element and round-to-nearest-even.
void quantize_acts_row(const float* x, std::size_t k, std::int8_t* q, std::int8_t* biased, float* scale,
                       std::int32_t* offset) {
  const std::size_t kb = k / quant_block;
#if defined(__AVX512F__)
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (std::size_t b = 0; b < kb; ++b) {
    const float* xb = x + b * quant_block;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
    const __m256i packed = _mm256_set_m128i(_mm512_cvtsepi32_epi8(q1), _mm512_cvtsepi32_epi8(q0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * quant_block), packed);
    if (biased)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(biased + b * quant_block), _mm256_xor_si256(packed, _mm256_set1_epi8(-128)));
    scale[b] = d;
    offset[b] = 8 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
#elif defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::size_t b = 0; b < kb; ++b) {
    const float* xb = x + b * quant_block;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (std::size_t i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i qi[4];
    for (std::size_t i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    const __m256i packed = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * quant_block), packed);
    if (biased)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(biased + b * quant_block), _mm256_xor_si256(packed, _mm256_set1_epi8(-128)));
    scale[b] = d;
    offset[b] = 8 * _mm_cvtsi128_si32(s4);
  }
#else
  quantize_activations(x, k, q, scale, offset);
  for (std::size_t b = 0; b < kb; ++b) offset[b] *= 8;
  if (biased)
    for (std::size_t i = 0; i < k; ++i) biased[i] = std::int8_t(std::uint8_t(q[i]) ^ 0x80u);
#endif
}

void quant_task(const quant_acts& a, std::size_t rows, const quant_view& w, std::size_t p0, std::size_t np, const float* bias,
                float* y) {
#if defined(__AVX512F__)
  // Batch 1 of q4_0 has its own loop; long rows take panels in pairs. Measured on an AMD EPYC
  // (paired A/B, calls interleaved): down_proj's 2048x5632 went from 41 to 55 GB/s, while for
  // k = 2048 pairs cost 5-9%, so they start at k = 4096.
  if (rows == 1 && w.type == quant_type::q4_0) {
    std::size_t p = p0;
    if (w.k >= 4096)
      for (; p + 1 < p0 + np; p += 2) panel_q4_0_row<2>(a, 0, w, p, bias, y);
    for (; p < p0 + np; ++p) panel_q4_0_row<1>(a, 0, w, p, bias, y);
    return;
  }
#endif
  for (std::size_t p = p0; p < p0 + np; ++p)
    for (std::size_t r0 = 0; r0 < rows; r0 += tile_rows) panel_rows(a, r0, std::min(tile_rows, rows - r0), w, p, bias, y);
}

}  // namespace troupe::kernels::TROUPE_ISA
