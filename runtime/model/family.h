// A model family: everything that makes it differ from the others, in one unit of its own
// (runtime/model/families/NAME.cpp), as llama.cpp keeps one file per architecture. A family says
// which config.json architectures and which GGUF general.architecture it reads, the keys of its
// own that each holds, and its per-layer tensors' names in both formats. What it reads sets the
// recipe fields of model_config (attention biases, query/key norms, experts, ...), and the one
// forward composes its shared blocks from those; the engine, scheduler, KV cache, speculation,
// LoRA, quantization and parallelism never ask which family a model is.
//
// Adding a family: write families/NAME.cpp defining `const family& NAME_family()`, and list it
// in families/registry.cpp. Keys every family shares (sizes, heads, RoPE base and scaling, norm
// epsilon, BOS/EOS) are read before the family's own reader runs, so it reads only what is its.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/config_keys.h"
#include "runtime/model/model_config.h"

namespace troupe::model {

struct family {
  std::string name;                           // synth's --arch and config.json's model_type
  std::vector<std::string> hf_architectures;  // config.json's "architectures"; the first is written
  // general.architecture; empty: the family has no GGUF layout here. Several families may write
  // one (Mistral's files say llama): reading such a file gives the first registered.
  std::string gguf_architecture;
  // Per-layer tensors: GGUF's part of the name (between "blk.N." and ".weight"/".bias") and
  // Hugging Face's (between "model.layers.N." and ".weight"/".bias").
  std::vector<std::pair<std::string, std::string>> layer_tensors;
  // llama.cpp's converter stores each head's query and key rows with the two halves of a rotary
  // pair adjacent (its "normal" RoPE); the loader puts them back in Hugging Face's order.
  bool gguf_interleaves_rope = false;
  // The family's own keys, read after the shared ones (may be empty).
  std::function<void(const hf_keys&, model_config&)> read_hf;
  std::function<void(const gguf_keys&, model_config&)> read_gguf;
  // The family's own config.json keys for `c` (what the synthesizer writes; may be empty).
  std::function<void(const model_config&, nlohmann::json&)> write_hf;
  // The family's own GGUF keys for `c`, as {suffix after "ARCH.": number} (what GGUF export
  // writes beyond the shared ones: integers as u32, others as f32; may be empty).
  std::function<nlohmann::json(const model_config&)> write_gguf;
  // A synthesized model's recipe beyond the preset's sizes (window, caps; may be empty).
  std::function<void(model_config&)> synth;
};

// Every family, in the registry's order.
const std::vector<const family*>& families();
// The family of a config.json architecture or a GGUF general.architecture; nullptr if none.
const family* family_of_hf(const std::string& architecture);
const family* family_of_gguf(const std::string& architecture);
const family* family_named(const std::string& name);
// What the registry reads, for error messages: "LlamaForCausalLM, Qwen2ForCausalLM, ...".
std::string known_hf_architectures();
std::string known_gguf_architectures();

// The per-layer tensors every dense decoder in Llama's mould has (norms, attention, SwiGLU MLP):
// what most families' layer_tensors start from.
std::vector<std::pair<std::string, std::string>> decoder_layer_tensors();
// Those plus a mixture of experts' as llama.cpp stacks them: the router (ffn_gate_inp) and the
// experts' gate, up and down projections, each one [experts][rows][row] tensor (ffn_*_exps)
// whose Hugging Face name holds a '*' for the expert; `mixtral`: Mixtral's names
// (block_sparse_moe.experts.E.w1/w3/w2), else Qwen's (mlp.experts.E.gate_proj/...); `shared`:
// Qwen2-MoE's shared expert and its gate (ffn_*_shexp, ffn_gate_inp_shexp).
std::vector<std::pair<std::string, std::string>> moe_layer_tensors(bool mixtral, bool shared);

}  // namespace troupe::model
