// A GGUF file as the loader's model_config and Hugging Face-named tensors, for any family in the
// registry (family.h) with a GGUF layout: the keys every family shares read under the file's
// general.architecture prefix (llama.embedding_length, qwen3.attention.key_length, ...), then the
// family's own; blk.N.* tensors under model.layers.N.* by the family's table; where the family's
// converter interleaved each query and key head's rotary halves (llama), the rows put back in
// Hugging Face order, so the same RoPE code serves both.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/gguf.h"
#include "runtime/model/model_config.h"
#include "runtime/model/family.h"
#include "runtime/model/safetensors.h"

namespace troupe::model {

// Whether a --model path names a GGUF file (ends in .gguf) rather than a folder.
bool is_gguf_path(const std::string& path);

// Throws input_error naming the key for an unknown architecture, a missing size or a feature
// the loader does not build (a RoPE scaling type, experts, partial rotary embeddings).
model_config gguf_model_config(const gguf_file& g);

// A family's experts from its GGUF keys (<arch>.expert_count, expert_used_count; `expert_ff`
// features each), or nothing for a dense file: what a family's read_gguf sets c.moe to.
std::optional<moe_config> gguf_moe(const gguf_keys& k, int expert_ff, moe_layout layout, bool normalize_top_k);

// The tensors under Hugging Face names (F32/F16/BF16 as such; Q8_0/Q4_0 as U8 rows with
// `quant` set, the K-quants with `kquant`). Tensors whose rows had to be reordered live in
// `storage`. A tensor the family does not name is an error naming it; shapes are checked by the
// loader, which names the tensor. A stacked experts' tensor (the family names it with a '*' for
// the expert) becomes one view per expert: model.layers.N.mlp.experts.E.gate_proj.weight.
std::vector<tensor_info> gguf_model_tensors(const gguf_file& g, const model_config& c,
                                            std::vector<std::vector<std::uint8_t>>& storage);

}  // namespace troupe::model
