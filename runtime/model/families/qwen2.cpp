// Qwen2 and Qwen2.5 (Qwen2ForCausalLM): Llama's layers with a bias on the query, key and value
// projections. llama.cpp runs it with NEOX (rotate-half) RoPE, so its converter leaves the query
// and key rows in Hugging Face's order; the biases are blk.N.attn_{q,k,v}.bias.
#include "runtime/model/family.h"

namespace troupe::model {

const family& qwen2_family() {
  static const family f{
      .name = "qwen2",
      .hf_architectures = {"Qwen2ForCausalLM"},
      .gguf_architecture = "qwen2",
      .layer_tensors = decoder_layer_tensors(),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys&, model_config& c) { c.attention_bias = true; },
      .read_gguf = [](const gguf_keys&, model_config& c) { c.attention_bias = true; },
      .write_hf = {},
  };
  return f;
}

}  // namespace troupe::model
