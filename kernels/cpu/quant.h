// Quantized weight formats, row by row as they are stored on disk (docs/quantization.md).
//
// q8_0 and q4_0 are GGML's block formats, so a GGUF file's tensors load without conversion:
// each run of 32 weights of a row is one block, an f16 scale d followed by the quants.
//   q8_0: 34 bytes = d, int8 q[32];             w[i] = d * q[i]
//   q4_0: 18 bytes = d, uint8 qs[16];           w[i] = d * (nibble_i - 8), element i < 16 in the
//         low nibble of qs[i], element i + 16 in the high nibble of qs[i]
// int8 is per output channel: a row of k int8 and one f32 scale s per row; w[i] = s * q[i].
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace troupe::kernels {

enum class quant_type : std::uint8_t { q8_0, q4_0, int8 };

constexpr std::size_t quant_block = 32;  // weights per block (and per activation block)

const char* quant_name(quant_type t);  // "q8_0", "q4_0", "int8"
std::optional<quant_type> parse_quant_type(const std::string& s);

// Bytes of one stored row of k weights (k a multiple of quant_block for the block formats).
std::size_t quant_row_bytes(quant_type t, std::size_t k);

// Quantizes one row of k floats into `out` (quant_row_bytes bytes). For int8 the row's scale is
// written to *scale; the block formats ignore it. Round to nearest as GGML does.
void quantize_row(quant_type t, const float* x, std::size_t k, std::uint8_t* out, float* scale);

// The weights a stored row stands for; `scale` is the int8 row scale (ignored otherwise).
void dequantize_row(quant_type t, const std::uint8_t* row, std::size_t k, float scale, float* out);

// Signed quant of element i of a stored row (q4_0: nibble - 8), and block b's scale (f16 bits
// for the block formats).
int quant_at(quant_type t, const std::uint8_t* row, std::size_t i);
std::uint16_t block_scale_bits(quant_type t, const std::uint8_t* row, std::size_t b);

}  // namespace troupe::kernels
