// A quantized linear weight re-laid out for the int8 matmul kernels, and the matmul itself.
//
// The kernels quantize each activation row to int8 blocks of 32 (q8 with an f32 scale dx, as
// llama.cpp does), take every block's dot product with the weight's quants in exact integer
// arithmetic, and accumulate in f32 per output, block after block:
//   acc = fma(float(isum_b), dw_b * dx_b, acc)       (q8_0, q4_0; dw_b the weight block's scale)
//   acc = fma(float(isum_b), dx_b, acc); y = acc * s (int8; s the output channel's scale)
// then add the bias. Every ISA computes exactly these operations per output, so each is the
// same bits as quant_linear_reference, for any number of rows.
//
// Packed layout: outputs in panels of 16; for panel p and weight block b, a record of
//   q8_0: 16 f16 scales, then 8 groups g of [16 outputs][4 quants] (k = 32b + 4g + i)  544 bytes
//   q4_0: 16 f16 scales, then 4 vectors h of [16 outputs][4 bytes], each byte holding the quant
//         of k = 32b + 4h + i in its low nibble and of k = 32b + 16 + 4h + i in its high one  288
//   int8: 8 groups as q8_0, no scales (they are per output, in `channel_scale`)            512
// so one 64-byte load feeds 16 outputs (a VNNI dot of 4 bytes per lane). Outputs past n are
// zero weights with zero scales.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant.h"

namespace troupe::kernels {

constexpr std::size_t quant_panel = 16;

constexpr std::size_t quant_record_bytes(quant_type t) {
  return t == quant_type::q8_0 ? 544 : t == quant_type::q4_0 ? 288 : 512;
}

// What the per-ISA kernels see: plain pointers only.
struct quant_view {
  quant_type type;
  std::size_t n, k, panels, blocks;
  const std::uint8_t* data;    // panels * blocks records
  const float* channel_scale;  // int8: panels * 16 scales; else null
};

// Activation rows quantized to int8 blocks of 32.
struct quant_acts {
  const std::int8_t* q;       // [rows][k]
  const std::int8_t* biased;  // [rows][k] the same bytes xor 0x80: q + 128 as unsigned (VNNI's operand
                              // for q8_0/int8); null where the kernel does not read it
  const float* scale;       // [rows][k / 32]
  const std::int32_t* offset;  // [rows][k / 32] 8 * the sum of each block's quants (q4_0's offset of 8)
};

struct quant_weight {
  quant_type type = quant_type::q8_0;
  std::size_t n = 0, k = 0, panels = 0;
  std::shared_ptr<std::uint8_t[]> data;    // 64-byte aligned
  std::shared_ptr<float[]> channel_scale;  // int8 only

  // Bytes a matmul reads (the roofline's numerator).
  std::size_t bytes() const;
  quant_view view() const;
};

// Packs n stored rows (quant_row_bytes(t, k) bytes each, concatenated) and, for int8, their n
// scales. k must be a multiple of 32 (checked by the caller, which names the tensor).
quant_weight pack_quant_weight(quant_type t, const std::uint8_t* rows, const float* row_scales, std::size_t n,
                               std::size_t k);

// The ISA the quantized kernels run on: the active one, except that AVX-512 is used only where
// the CPU has VNNI (else AVX2).
isa quant_isa();

// y[t][c] = sum_k x[t][k] * W[c][k] (+ bias[c]) with the arithmetic above. Runs on all kernel
// threads, on quant_isa().
void quant_linear(const float* x, std::size_t rows, const quant_weight& w, const float* bias, float* y);

// The same figures from the stored rows directly, one output at a time: the plain reference.
void quant_linear_reference(const float* x, std::size_t rows, quant_type t, const std::uint8_t* stored_rows,
                            const float* row_scales, std::size_t n, std::size_t k, const float* bias, float* y);

// Quantizes one activation row (k floats) into q (k int8), scale and sum (k / 32 each).
void quantize_activations(const float* x, std::size_t k, std::int8_t* q, float* scale, std::int32_t* sum);

}  // namespace troupe::kernels
