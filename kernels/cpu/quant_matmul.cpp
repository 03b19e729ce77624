// The int8 matmul over packed quantized weights (see quant_weight.h for the arithmetic every
// ISA must reproduce bit for bit), compiled once per ISA like gemm/gemv.
#include <algorithm>
#include <cmath>
#include <cstring>

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
constexpr std::size_t tile_rows = 8;

// C integer accumulators per row: 4 for a lone row, so its dot products do not wait on each
// other; 1 for a tile of rows, which already has a chain per row (sums are exact in any order).
template <std::size_t C>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void panel_rows_c(const quant_acts& a, std::size_t r0, std::size_t nr,
                                                                         const quant_view& w, std::size_t p, const float* bias,
                                                                         float* y) {
  const std::size_t kb = w.k / quant_block, rb = quant_record_bytes(w.type);
  __m512 facc[tile_rows];
  for (auto& f : facc) f = _mm512_setzero_ps();
  const __m512i ones = _mm512_set1_epi8(1), low = _mm512_set1_epi8(0x0f);
  for (std::size_t b = 0; b < kb; ++b) {
    const std::uint8_t* rec = w.data + (p * w.blocks + b) * rb;
    // One core's stream outruns its hardware prefetcher at batch 1: ask for the record 4 ahead.
    for (std::size_t off = 0; off < rb; off += 64) _mm_prefetch(reinterpret_cast<const char*>(rec + 4 * rb + off), _MM_HINT_T0);
    __m512i acc[tile_rows][C];
    for (auto& row : acc)
      for (auto& c : row) c = _mm512_setzero_si512();
    if (w.type == quant_type::q4_0) {
      for (std::size_t h = 0; h < 4; ++h) {
        const __m512i v = _mm512_loadu_si512(rec + 32 + h * 64);
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        const std::size_t cl = C == 4 ? 2 * (h & 1) : 0, ch = C == 4 ? cl + 1 : 0;
        for (std::size_t r = 0; r < nr; ++r) {
          const std::int8_t* xq = a.q + (r0 + r) * w.k + b * quant_block;
          acc[r][cl] = _mm512_dpbusd_epi32(acc[r][cl], lo, _mm512_set1_epi32(load4(xq + 4 * h)));
          acc[r][ch] = _mm512_dpbusd_epi32(acc[r][ch], hi, _mm512_set1_epi32(load4(xq + 16 + 4 * h)));
        }
      }
      for (std::size_t r = 0; r < nr; ++r)
        acc[r][0] = _mm512_sub_epi32(acc[r][0], _mm512_set1_epi32(8 * a.sum[(r0 + r) * kb + b]));
    } else {  // signed weights: dot(x + 128, w) - 128 * sum(w), x + 128 being unsigned
      const std::uint8_t* base = rec + (w.type == quant_type::q8_0 ? 32 : 0);
      __m512i wsum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (std::size_t g = 0; g < 8; ++g) {
        const __m512i v = _mm512_loadu_si512(base + g * 64);
        wsum[g & 1] = _mm512_dpbusd_epi32(wsum[g & 1], ones, v);
        const std::size_t c = C == 4 ? g & 3 : 0;
        for (std::size_t r = 0; r < nr; ++r) {
          const std::int8_t* xb = a.biased + (r0 + r) * w.k + b * quant_block;
          acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], _mm512_set1_epi32(load4(xb + 4 * g)), v);
        }
      }
      const __m512i off = _mm512_slli_epi32(_mm512_add_epi32(wsum[0], wsum[1]), 7);
      for (std::size_t r = 0; r < nr; ++r) acc[r][0] = _mm512_sub_epi32(acc[r][0], off);
    }
    const __m512 dw = w.type == quant_type::int8 ? _mm512_set1_ps(1.0f)
                                                  : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
    for (std::size_t r = 0; r < nr; ++r) {
      const __m512 dx = _mm512_set1_ps(a.scale[(r0 + r) * kb + b]);
      const __m512 d = w.type == quant_type::int8 ? dx : _mm512_mul_ps(dw, dx);
      __m512i isum = acc[r][0];
      if constexpr (C == 4) isum = _mm512_add_epi32(_mm512_add_epi32(acc[r][0], acc[r][1]), _mm512_add_epi32(acc[r][2], acc[r][3]));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, facc[r]);
    }
  }
  alignas(64) float out[quant_panel];
  for (std::size_t r = 0; r < nr; ++r) {
    _mm512_store_ps(out, facc[r]);
    finish_row(w, p, out, bias, y + (r0 + r) * w.n);
  }
}

void panel_rows(const quant_acts& a, std::size_t r0, std::size_t nr, const quant_view& w, std::size_t p, const float* bias,
                float* y) {
  if (nr == 1)
    panel_rows_c<4>(a, r0, nr, w, p, bias, y);
  else
    panel_rows_c<1>(a, r0, nr, w, p, bias, y);
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
          acc[r][0] = _mm256_sub_epi32(acc[r][0], _mm256_set1_epi32(8 * a.sum[(r0 + r) * kb + b]));
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

void quant_task(const quant_acts& a, std::size_t rows, const quant_view& w, std::size_t p0, std::size_t np, const float* bias,
                float* y) {
  for (std::size_t p = p0; p < p0 + np; ++p)
    for (std::size_t r0 = 0; r0 < rows; r0 += tile_rows) panel_rows(a, r0, std::min(tile_rows, rows - r0), w, p, bias, y);
}

}  // namespace troupe::kernels::TROUPE_ISA
