// GGML's K-quant and IQ4_XS block formats, as llama.cpp writes them into GGUF files (Q4_K_M
// and the other mixes are these, tensor by tensor): the plain reference that every kernel
// reading them is tested against, and the dequantized rows the embedding table is read from.
//
// Why written here: no packaged library decodes them (Debian 12 ships no ggml), and each
// kernel needs a reference that is simple enough to check against the format by eye. Every
// format is a super-block of 256 weights; the byte layouts (little-endian, f16 scales):
//   q2_k   84 B: scales[16] (low nibble scale, high nibble min, 4 bits each), qs[64] (2-bit
//                quants, four per byte), d, dmin.  w = d * scale * q - dmin * min
//   q3_k  110 B: hmask[32] (each quant's third bit), qs[64] (its low two bits), scales[12]
//                (16 six-bit scales, stored + 32), d.  w = d * (scale - 32) * (q - 4 * !hbit)
//   q4_k  144 B: d, dmin, scales[12] (8 six-bit scales and 8 six-bit mins), qs[128] (nibbles).
//                w = d * scale * q - dmin * min, per 32 weights
//   q5_k  176 B: d, dmin, scales[12] (as q4_k), qh[32] (each quant's fifth bit), qs[128].
//   q6_k  210 B: ql[128] (low four bits), qh[64] (high two bits), scales[16] (int8), d.
//                w = d * scale * (q - 32), per 16 weights
//   iq4_xs 136 B: d, scales_h (u16: two high bits of each of 8 scales), scales_l[4] (their low
//                nibbles), qs[128] (nibbles indexing a fixed 16-value non-linear table).
//                w = d * (scale - 32) * table[q], per 32 weights
// Which element a quant belongs to is where the formats differ most; dequantize_kquant_row is
// written element-run by element-run in that order, and docs/quantization.md draws it.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace troupe::kernels {

enum class kquant_type : std::uint8_t { q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs };

constexpr std::size_t kquant_block = 256;  // weights per super-block

const char* kquant_name(kquant_type t);  // "q4_k", ...
std::optional<kquant_type> parse_kquant_type(const std::string& name);  // kquant_name's inverse
std::size_t kquant_block_bytes(kquant_type t);
// Weights per scale as the format stores them (16 for q2_k, q3_k and q6_k; 32 for the others).
constexpr std::size_t kquant_scale_run(kquant_type t) {
  return t == kquant_type::q4_k || t == kquant_type::q5_k || t == kquant_type::iq4_xs ? 32 : 16;
}
// The format of a GGUF tensor type number (ggml's: Q2_K = 10 ... Q6_K = 14, IQ4_XS = 23).
std::optional<kquant_type> kquant_of_ggml(std::uint32_t ggml_type);

// The weights a stored row of k weights stands for (k a multiple of kquant_block; the row is
// k / kquant_block blocks of kquant_block_bytes(t) bytes).
void dequantize_kquant_row(kquant_type t, const std::uint8_t* row, std::size_t k, float* out);

// One super-block in the integer form the matmul works in, the same for every format: unsigned
// quants in element order, and per run of 16 weights an integer scale and min, so that
//   folded formats (q3_k, q6_k, iq4_xs):  w = d * (scale * q - min)
//   the others (q2_k, q4_k, q5_k):        w = d * scale * q - dmin * min
// Signed quants are stored offset to unsigned (q3_k's q + 4, q6_k's q + 32, iq4_xs's level +
// 128) with the offset times the scale as the min; a 32-weight run's scale appears twice.
struct kquant_unpacked {
  std::uint8_t q[kquant_block];
  std::int32_t scale[16], min[16];
  float d, dmin;
};
constexpr bool kquant_folded(kquant_type t) {
  return t == kquant_type::q3_k || t == kquant_type::q6_k || t == kquant_type::iq4_xs;
}
void unpack_kquant_block(kquant_type t, const std::uint8_t* block, kquant_unpacked& out);
// Only the scales, mins, d and dmin (the vector kernels unpack the quants themselves).
void unpack_kquant_scales(kquant_type t, const std::uint8_t* block, kquant_unpacked& out);

// IQ4_NL's table (shared with IQ4_XS): sixteen levels spaced as the weights of a normal
// distribution fall, not evenly; and each plus 128, the unsigned quant of the form above.
inline constexpr std::int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr auto iq4_unsigned_levels = [] {
  std::array<std::uint8_t, 16> u{};
  for (std::size_t i = 0; i < 16; ++i) u[i] = std::uint8_t(iq4_levels[i] + 128);
  return u;
}();

// Quantizes a row of k floats (k a multiple of kquant_block) into `out` (k / kquant_block
// blocks), without an importance matrix: each run's scale (and min) from its own range, the
// super-block's d (and dmin) from the largest of those, then every weight to its nearest level.
void quantize_kquant_row(kquant_type t, const float* x, std::size_t k, std::uint8_t* out);

}  // namespace troupe::kernels
