// A linear weight stored in a K-quant or IQ4_XS format (kquant.h), kept as the file's rows,
// and the matmul that reads those rows directly.
//
// Activations are quantized as these formats' dot products want (llama.cpp's Q8_K): per run of
// 256, int8 quants with an f32 scale dx = max|x| / 127, and each run of 16's sum of quants.
// Each super-block of an output then costs exact integer sums over its unpacked form
// (kquant_unpacked):
//   sumq = sum over runs s of scale_s * sum_i q_i * x_i      summ = sum_s min_s * xsum_s
// and one or two fmas into the output's f32 accumulator, super-block after super-block:
//   folded formats:  acc = fma(float(sumq - summ), d * dx, acc)
//   the others:      acc = fma(float(sumq), d * dx, acc); acc = fma(float(summ), -(dmin * dx), acc)
// then the bias is added. The integer sums cannot overflow (the largest, iq4_xs's and q6_k's,
// stay under 2^29), so every ISA that computes them in any order and then these float steps
// in this order gives the bits of kquant_linear_reference.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/kquant.h"

namespace troupe::kernels {

constexpr std::size_t kquant_run = 16;  // weights per scale, in the unpacked form

// Activation rows quantized per 256: q [rows][k], dx [rows][k / 256], xsum [rows][k / 16].
struct kquant_acts {
  const std::int8_t* q;
  const float* dx;
  const std::int32_t* xsum;
};

// Q4_K (and Q5_K, Q6_K below) is re-laid out at load in panels of 16 outputs, as the q4_0 kernel's weights are
// (quant_weight.h), so that one 64-byte load feeds 16 outputs and no sum is added across lanes.
// The record of panel p and super-block b, 2368 bytes (the file's 16 x 144, and 64 more):
//   [0, 32)      d of the 16 outputs, f16          [32, 64)    their dmin, f16
//   [64, 192)    scale of sub-block s (0-7) of output j at 64 + 16 s + j, u8
//   [192, 320)   min likewise at 192 + 16 s + j
//   [320, 2368)  for chunk c (0-3) and group g (0-7), 64 bytes at 320 + (8 c + g) * 64: output
//                j's 4 bytes at j * 4, byte i holding the quant of weight 64 c + 4 g + i in its
//                low nibble and of weight 64 c + 32 + 4 g + i in its high one
// Q6_K likewise, 3360 bytes (exactly the file's 16 x 210):
//   [0, 32)      d of the 16 outputs, f16
//   [32, 288)    scale of run s (0-15, 16 weights each) of output j at 32 + 16 s + j, int8
//   [288, 2336)  the quants' low four bits, laid out as Q4_K's nibbles at 288 + (8 c + g) * 64
//   [2336, 3360) their top two bits: for chunk c and h (0-3), 64 bytes at 2336 + (4 c + h) * 64,
//                output j's byte i at j * 4 + i holding, from bit 0 up in pairs, those of weights
//                64 c + 8 h + i, 64 c + 32 + 8 h + i, 64 c + 8 h + 4 + i, 64 c + 32 + 8 h + 4 + i
// Q5_K as Q4_K, 2880 bytes, with each quant's fifth bit in [2368, 2880): for chunk c and h (0-1),
// 64 bytes at 2368 + (2 c + h) * 64, output j's byte i at j * 4 + i holding, bit 2 q + half,
// that of weight 64 c + 32 half + 4 (4 h + q) + i (q 0-3, half 0-1).
// IQ4_XS, 2208 bytes: d of the 16 outputs (f16) in [0, 32), sub-block s's signed scale (the
// stored one less 32) of output j at 32 + 16 s + j (int8), then the level indices laid out as
// Q4_K's nibbles from 160.
// Outputs past n are zeros. Q3_K and Q2_K keep the file's rows.
constexpr std::size_t kquant_panel = 16;
constexpr std::size_t q4k_record_bytes = 2368, q5k_record_bytes = 2880, q6k_record_bytes = 3360, iq4xs_record_bytes = 2208;
constexpr bool kquant_panelled(kquant_type t) {
  return t == kquant_type::q4_k || t == kquant_type::q5_k || t == kquant_type::q6_k || t == kquant_type::iq4_xs;
}
constexpr std::size_t kquant_record_bytes(kquant_type t) {
  return t == kquant_type::q4_k   ? q4k_record_bytes
         : t == kquant_type::q5_k ? q5k_record_bytes
         : t == kquant_type::q6_k ? q6k_record_bytes
                                  : iq4xs_record_bytes;
}

// What the per-ISA kernels see: plain pointers only.
struct kquant_view {
  kquant_type type;
  std::size_t n, k, blocks;  // blocks per row
  const std::uint8_t* data;  // n rows of `blocks` super-blocks as stored, or (kquant_panelled) records
};

struct kquant_weight {
  kquant_type type = kquant_type::q4_k;
  std::size_t n = 0, k = 0;
  std::shared_ptr<std::uint8_t[]> data;  // records as above for kquant_panelled types, else a copy of the rows

  bool panelled() const { return kquant_panelled(type); }

  std::size_t row_bytes() const { return k / kquant_block * kquant_block_bytes(type); }
  std::size_t bytes() const {  // what a matmul reads
    return panelled() ? (n + kquant_panel - 1) / kquant_panel * (k / kquant_block) * kquant_record_bytes(type) : n * row_bytes();
  }
  kquant_view view() const { return {type, n, k, k / kquant_block, data.get()}; }
};

// Output j (0-15) of a Q4_K, Q5_K, Q6_K or IQ4_XS record in the unpacked form (what unpack_kquant_block gives
// for the block it came from).
void unpack_kquant_record(kquant_type t, const std::uint8_t* record, std::size_t j, kquant_unpacked& u);

// Copies n stored rows of k weights (k a multiple of kquant_block: the caller checks it and
// names the tensor); Q4_K, Q5_K, Q6_K and IQ4_XS into panels.
kquant_weight make_kquant_weight(kquant_type t, const std::uint8_t* rows, std::size_t n, std::size_t k);

// One row of k floats into q (k), dx (k / 256) and xsum (k / 16).
void quantize_kquant_acts(const float* x, std::size_t k, std::int8_t* q, float* dx, std::int32_t* xsum);

// The float steps above for one super-block: every kernel ends each block with this.
inline float kquant_block_step(bool folded, std::int32_t sumq, std::int32_t summ, float d, float dmin, float dx, float acc) {
  if (folded) return std::fma(float(sumq - summ), d * dx, acc);
  acc = std::fma(float(sumq), d * dx, acc);
  return std::fma(float(summ), -(dmin * dx), acc);
}

// y[t][c] = sum_k x[t][k] * W[c][k] (+ bias[c]) with the arithmetic above, on all kernel
// threads and the active ISA (AVX-512 only where the CPU has VNNI, else AVX2).
void kquant_linear(const float* x, std::size_t rows, const kquant_weight& w, const float* bias, float* y);

// The same figures from the stored rows, one output and one super-block at a time.
void kquant_linear_reference(const float* x, std::size_t rows, kquant_type t, const std::uint8_t* stored_rows,
                             std::size_t n, std::size_t k, const float* bias, float* y);

}  // namespace troupe::kernels
