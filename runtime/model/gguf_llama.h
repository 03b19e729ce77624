// A llama-architecture GGUF file as the loader's model_config and Hugging Face-named tensors:
// config.json's fields from the llama.* metadata, blk.N.* tensors under model.layers.N.*, and
// the query and key rows put back in Hugging Face order (llama.cpp's converter interleaves each
// head's two rotary halves; this undoes it, so the same RoPE code serves both).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/gguf.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"

namespace troupe::model {

// Whether a --model path names a GGUF file (ends in .gguf) rather than a folder.
bool is_gguf_path(const std::string& path);

// Throws input_error naming the key for an unsupported architecture, a missing size or a
// feature the loader does not build (rope scaling, experts).
model_config gguf_llama_config(const gguf_file& g);

// The tensors under Hugging Face names (F32/F16/BF16 as such; Q8_0/Q4_0 as U8 rows with
// `quant` set). Tensors whose rows had to be reordered live in `storage`. An unknown tensor name
// is an error naming it; shapes are checked by the loader, which names the tensor.
std::vector<tensor_info> gguf_llama_tensors(const gguf_file& g, const model_config& c,
                                            std::vector<std::vector<std::uint8_t>>& storage);

}  // namespace troupe::model
