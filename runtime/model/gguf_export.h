// Writes a Hugging Face model folder of a family with a GGUF layout (family.h: llama, Mistral
// as llama, qwen2, qwen3) as a GGUF file, plain (f32, f16) or quantized under one of llama.cpp's
// mixes (`troupe model quantize --type q4_k_m --out FILE.gguf`): the file llama.cpp's own
// converter and llama-quantize would make of it, so llama.cpp, Ollama and Troupe itself read it.
//
// What goes in: general.* (the family's architecture, name, file_type, quantization_version 2),
// the hyperparameters under the architecture's prefix (head size as attention.key_length; a
// linear RoPE scaling as rope.scaling.*, Llama 3's as rope_freqs.weight), the tokenizer as
// tokenizer.ggml.* (byte-level BPE: its tokens, types, merges, pre-tokenizer by llama.cpp's
// name, BOS/EOS ids and whether BOS is prepended) with the chat template, and every tensor under
// its GGUF name by the family's table: query and key rows interleaved per head where the
// family's converter does it (llama), each matrix in the type the mix gives it
// (runtime/model/gguf_mix.h), norms and biases F32. A tied head writes no output.weight, as
// llama.cpp's converter does.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "runtime/model/quantize.h"

namespace troupe::model {

struct gguf_export_options {
  std::string in;   // a Hugging Face model folder (F32, F16 or BF16 weights)
  std::string out;  // the .gguf file to write (replaced if it exists)
  std::string mix = "q4_k_m";
};

// The ggml file_type number llama.cpp records for a mix (general.file_type: Q4_K_M is 15).
std::uint32_t gguf_file_type(const std::string& mix);

// Throws input_error naming what does not fit: an unknown mix, a GGUF file or an already
// quantized folder as input, a family with no GGUF layout or a mixture of experts, a RoPE
// scaling other than linear and llama3, a tokenizer that is not byte-level BPE. `progress` gets (tensors written, tensors).
quantize_report export_gguf(const gguf_export_options& o, const std::function<void(std::size_t, std::size_t)>& progress = {});

}  // namespace troupe::model
