// Llama 1-3.x (LlamaForCausalLM): the decoder the others are told apart from. RMSNorm before
// attention and MLP, grouped-query attention with RoPE (rotate-half in Hugging Face folders; in
// GGUF files llama.cpp's converter interleaves the rotary pairs of each query and key head), a
// SwiGLU MLP. Llama 3.1-3.3's frequency-dependent RoPE scaling is shared (rope_scaling type
// llama3; rope_freqs.weight in GGUF), as are 3.2's tied embeddings. Mistral and Mixtral GGUF
// files are written as this architecture too.
#include "runtime/model/family.h"
#include "runtime/model/gguf_import.h"

namespace troupe::model {

const family& llama_family() {
  static const family f{
      .name = "llama",
      .hf_architectures = {"LlamaForCausalLM"},
      .gguf_architecture = "llama",
      .layer_tensors = moe_layer_tensors(true, false),  // Mixtral's files are llama ones with experts
      .gguf_interleaves_rope = true,
      .read_hf = [](const hf_keys& k, model_config& c) { c.attention_bias = k.bool_or("attention_bias", false); },
      .read_gguf = [](const gguf_keys& k, model_config& c) {
        c.moe = gguf_moe(k, c.intermediate_size, moe_layout::mixtral, true);
        if (c.moe) c.architecture = "MixtralForCausalLM", c.family = "mixtral";
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) { j["attention_bias"] = c.attention_bias; },
  };
  return f;
}

}  // namespace troupe::model
