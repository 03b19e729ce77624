// Mistral 7B and Mistral Nemo (MistralForCausalLM): Llama's layers; Nemo gives its head size
// (head_dim 128 with hidden 5120 and 32 heads). Mistral's GGUF files are written as llama, so
// a GGUF file reads as the llama family. Mistral 7B v0.1 attends to a sliding window of 4096 positions
// (`sliding_window`); later versions set it to null.
#include "runtime/model/family.h"

namespace troupe::model {

const family& mistral_family() {
  static const family f{
      .name = "mistral",
      .hf_architectures = {"MistralForCausalLM"},
      .gguf_architecture = "llama",  // its GGUF files say llama; reading one gives the llama family
      .layer_tensors = decoder_layer_tensors(),
      .gguf_interleaves_rope = true,
      .read_hf = [](const hf_keys& k, model_config& c) { c.attention_bias = k.bool_or("attention_bias", false); },
      .read_gguf = {},
      .write_hf = [](const model_config& c, nlohmann::json& j) { j["attention_bias"] = c.attention_bias; },
  };
  return f;
}

}  // namespace troupe::model
