// The register-tiled inner loop shared by gemm and gemv (per-ISA translation units only).
//
// Each output y[r][c] is acc = fma(x[r][k], W[c][k], acc) for k = 0..K-1 from acc = 0, then
// + bias[c]: the same sequence of roundings whatever the tile shape, the batch size or the ISA.
#pragma once
#include <type_traits>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/weight_view.h"

namespace troupe::kernels::TROUPE_ISA {

// R rows of x times P panels of W, written to y (row stride ldy); cols beyond w.n are dropped.
constexpr std::size_t prefetch_rows = 48;

template <dtype T>
inline vec16 load_weight(const void* p) {
  if constexpr (T == dtype::f32) return load16(static_cast<const float*>(p));
  else return load16(static_cast<const std::uint16_t*>(p), T);
}

// Inner indices [k0, k1) only: a tile that does not start at 0 resumes from `carry` (R x P
// vectors) and one that does not reach K leaves its sums there, so a row's sums see the same fmas
// in the same order as in one pass (a float stored and loaded is unchanged).
template <int R, int P, dtype T>
inline void matmul_tile(const float* x, std::size_t ldx, const weight_view& w, std::size_t p0,
                        std::size_t k0, std::size_t k1, float* carry, const float* bias, float* y,
                        std::size_t ldy) {
  using E = std::conditional_t<T == dtype::f32, float, std::uint16_t>;
  const std::size_t K = w.k;
  const E* base[P];
  for (int p = 0; p < P; ++p) base[p] = static_cast<const E*>(w.data) + panel_offset(p0 + std::size_t(p), K);
  vec16 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = k0 == 0 ? zero16() : load16(carry + (r * P + p) * panel);
  for (std::size_t k = k0; k < k1; ++k) {
#if defined(__AVX2__)
    if constexpr (P == 4) {  // the first pass over a weight block streams it from memory: fetch ahead
      const char* ahead = reinterpret_cast<const char*>(base[0] + (k + prefetch_rows) * group_width);
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + 64, _MM_HINT_T0);
      if constexpr (sizeof(E) == 4) {
        _mm_prefetch(ahead + 128, _MM_HINT_T0);
        _mm_prefetch(ahead + 192, _MM_HINT_T0);
      }
    }
#endif
    vec16 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = load_weight<T>(base[p] + k * group_width);
    for (int r = 0; r < R; ++r) {
      vec16 xb = splat16(x[r * ldx + k]);
      for (int p = 0; p < P; ++p) acc[r][p] = fma16(xb, wv[p], acc[r][p]);
    }
  }
  if (k1 < K) {
    for (int r = 0; r < R; ++r)
      for (int p = 0; p < P; ++p) store16(carry + (r * P + p) * panel, acc[r][p]);
    return;
  }
  for (int p = 0; p < P; ++p) {
    std::size_t c0 = (p0 + p) * panel;
    if (c0 >= w.n) break;
    std::size_t valid = w.n - c0 < std::size_t(panel) ? w.n - c0 : std::size_t(panel);
    for (int r = 0; r < R; ++r) {
      float out[panel];
      store16(out, acc[r][p]);
      float* dst = y + r * ldy + c0;
      if (bias) for (std::size_t j = 0; j < valid; ++j) dst[j] = out[j] + bias[c0 + j];
      else for (std::size_t j = 0; j < valid; ++j) dst[j] = out[j];
    }
  }
}

template <int R, int P>
inline void matmul_tile_any(const float* x, std::size_t ldx, const weight_view& w, std::size_t p0,
                            std::size_t k0, std::size_t k1, float* carry, const float* bias, float* y,
                            std::size_t ldy) {
  switch (w.type) {
    case dtype::f32: return matmul_tile<R, P, dtype::f32>(x, ldx, w, p0, k0, k1, carry, bias, y, ldy);
    case dtype::f16: return matmul_tile<R, P, dtype::f16>(x, ldx, w, p0, k0, k1, carry, bias, y, ldy);
    case dtype::bf16: return matmul_tile<R, P, dtype::bf16>(x, ldx, w, p0, k0, k1, carry, bias, y, ldy);
    case dtype::int8: return;  // a KV cache type: no weight is stored as int8 elements (packed_weight refuses it)
  }
}

using tile_fn = void (*)(const float*, std::size_t, const weight_view&, std::size_t, std::size_t,
                         std::size_t, float*, const float*, float*, std::size_t);

// Every tile shape up to RMAX x PMAX, so remainders run the same code as full tiles.
template <int RMAX, int PMAX>
struct tile_table {
  tile_fn f[RMAX][PMAX];
  constexpr tile_table() : f{} { fill<0>(); }
  template <int I>
  constexpr void fill() {
    if constexpr (I < RMAX * PMAX) {
      f[I / PMAX][I % PMAX] = &matmul_tile_any<I / PMAX + 1, I % PMAX + 1>;
      fill<I + 1>();
    }
  }
};

// Rows [0, rows) x panels [p0, p0 + np) with tiles of at most RMAX x PMAX, the inner dimension
// in slices of `slice` indices; remainders use smaller instantiations (the arithmetic per output is
// the same). With more than one slice, `carry` holds each tile's sums between slices
// (tiles x RMAX x PMAX vectors); with one it may be null.
template <int RMAX, int PMAX>
inline void matmul_tiles(const float* x, std::size_t rows, std::size_t ldx, const weight_view& w,
                         std::size_t p0, std::size_t np, const float* bias, float* y, std::size_t ldy,
                         std::size_t slice, float* carry) {
  static constexpr tile_table<RMAX, PMAX> table{};
  constexpr std::size_t carry_per_tile = std::size_t(RMAX) * PMAX * panel;
  // Rows are split into tiles of near-equal height (32 rows: 6,6,5,5,5,5 rather than
  // 6,6,6,6,6,2), so no tile wastes most of its weight loads.
  const std::size_t tiles = (rows + RMAX - 1) / RMAX;
  for (std::size_t p = p0; p < p0 + np; p += PMAX) {
    std::size_t pn = p0 + np - p < std::size_t(PMAX) ? p0 + np - p : std::size_t(PMAX);
    std::size_t k0 = 0;
    do {  // once at least: an empty inner dimension still writes the bias
      const std::size_t k1 = w.k - k0 < slice ? w.k : k0 + slice;
      std::size_t r = 0;
      for (std::size_t t = 0; t < tiles; ++t) {
        std::size_t rn = rows / tiles + (t < rows % tiles ? 1 : 0);
        float* c = carry ? carry + t * carry_per_tile : nullptr;
        table.f[rn - 1][pn - 1](x + r * ldx, ldx, w, p, k0, k1, c, bias, y + r * ldy, ldy);
        r += rn;
      }
      k0 = k1;
    } while (k0 < w.k);
  }
}

// Each tile over the whole inner dimension in one pass.
template <int RMAX, int PMAX>
inline void matmul_block(const float* x, std::size_t rows, std::size_t ldx, const weight_view& w,
                         std::size_t p0, std::size_t np, const float* bias, float* y,
                         std::size_t ldy) {
  matmul_tiles<RMAX, PMAX>(x, rows, ldx, w, p0, np, bias, y, ldy, w.k > 0 ? w.k : 1, nullptr);
}

// The same outputs for a few more rows than one tile holds (a sequence's verify rows, a small
// batch of them; at most TILES tiles), reading the weight from memory once: the inner dimension
// is cut into slices that stay in L1 while every tile of rows passes over them. Without it each
// further tile re-read a whole group of panels (256-700 KB on a 1B model) that had left L1 and
// L2: with 4-row tiles, five rows of the 1B preset's matrices took 1.3 times four, eight rows 1.5
// times one.
template <int RMAX, int PMAX, int TILES>
inline void matmul_block_sliced(const float* x, std::size_t rows, std::size_t ldx, const weight_view& w,
                                std::size_t p0, std::size_t np, const float* bias, float* y,
                                std::size_t ldy) {
  alignas(64) float carry[TILES * RMAX * PMAX * panel];
  // 16 KB of weight per slice: 128 inner indices of a group of f16 panels, 64 of f32.
  const std::size_t slice = 16384 / (group_width * dtype_size(w.type));
  matmul_tiles<RMAX, PMAX>(x, rows, ldx, w, p0, np, bias, y, ldy, slice, carry);
}

}  // namespace troupe::kernels::TROUPE_ISA
