// llama.cpp's quantization mixes for a llama model: which ggml type each tensor of a GGUF file
// gets under `q4_k_m` and the others. `troupe model quantize` writes them and the tests' GGUF
// files are made with them, so the files Troupe is checked against are mixed as the ones
// users download are.
//
// The rules follow llama.cpp's (llama_tensor_get_type) for the tensors a dense llama has:
//   - the output head is Q6_K (Q8_0 under q8_0), whatever the base type;
//   - q4_k_m / q5_k_m: attn_v and ffn_down are Q6_K in the layers that get more bits (the first
//     and last eighth, and every third between);
//   - q3_k_m: attn_v Q5_K in the first two layers and Q4_K after, attn_output Q4_K, ffn_down
//     Q5_K in the first sixteenth of the layers (at least one) and Q4_K after;
//   - q2_k: attn_v Q4_K, attn_output and ffn_down Q3_K;
//   - norms stay F32.
// Where a row is not whole super-blocks of 256, a K-quant or IQ4_XS tensor falls back to Q8_0
// (q5_k, q6_k) or Q4_0 (the others); llama.cpp picks Q5_0/Q5_1/IQ4_NL there, which Troupe
// does not read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::model {

// The mixes by name: q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k, iq4_xs, q4_0, q8_0.
const std::vector<std::string>& gguf_mixes();

// The ggml type number of GGUF tensor `name` (blk.N.attn_v.weight, output.weight, ...) of a
// model with `layers` blocks, whose rows are `row_length` long, under `mix`; F32 (0) for
// norms. Throws input_error for an unknown mix.
std::uint32_t gguf_mix_type(const std::string& mix, const std::string& name, int layers, std::int64_t row_length);

// The GGUF name of a dense llama's Hugging Face tensor (model.layers.3.mlp.down_proj.weight is
// blk.3.ffn_down.weight), or nothing for a tensor a GGUF llama file has no place for.
std::optional<std::string> gguf_tensor_name(const std::string& hf_name);

// What the mixes' types are, for a writer: F32 (0), F16 (1), Q4_0 (2), Q8_0 (8), the K-quants and IQ4_XS.
// Bytes of one row of `len` weights (`len` a multiple of the type's block).
std::size_t ggml_row_bytes(std::uint32_t type, std::size_t len);
// One row quantized, as llama.cpp lays it out (without an importance matrix); copied for F32.
void quantize_ggml_row(std::uint32_t type, const float* in, std::size_t len, std::uint8_t* out);
// Troupe's name of the format, lower case as the CLI spells it: "q4_k", "iq4_xs", "q4_0", "f32"
// (gguf.h's ggml_type_name gives ggml's: "Q4_K").
std::string ggml_format_name(std::uint32_t type);

}  // namespace troupe::model
