// Granite 3 (GraniteForCausalLM): Llama's layers with four multipliers: the token embeddings
// (embedding_multiplier), each sublayer's output before it joins the residual
// (residual_multiplier), the attention scores in place of 1 / sqrt(head_dim)
// (attention_multiplier), and the logits, divided by logits_scaling. In GGUF (converted as
// llama, so query/key rows interleaved): granite.embedding_scale, residual_scale,
// attention.scale, logit_scale.
#include "runtime/model/family.h"

namespace troupe::model {

const family& granite_family() {
  static const family f{
      .name = "granite",
      .hf_architectures = {"GraniteForCausalLM"},
      .gguf_architecture = "granite",
      .layer_tensors = decoder_layer_tensors(),
      .gguf_interleaves_rope = true,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.attention_bias = k.bool_or("attention_bias", false);
        c.embedding_scale = k.real_or("embedding_multiplier", 1.0);
        c.residual_scale = k.real_or("residual_multiplier", 1.0);
        c.attention_multiplier = k.real_or("attention_multiplier", 0.0);
        c.logit_divisor = k.real_or("logits_scaling", 1.0);
      },
      .read_gguf = [](const gguf_keys& k, model_config& c) {
        c.embedding_scale = k.real_or("embedding_scale", 1.0);
        c.residual_scale = k.real_or("residual_scale", 1.0);
        c.attention_multiplier = k.real_or("attention.scale", 0.0);
        c.logit_divisor = k.real_or("logit_scale", 1.0);
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        j["attention_bias"] = c.attention_bias;
        j["embedding_multiplier"] = c.embedding_scale;
        j["residual_multiplier"] = c.residual_scale;
        j["attention_multiplier"] = c.attention_multiplier;
        j["logits_scaling"] = c.logit_divisor;
      },
      .write_gguf = [](const model_config& c) {
        return nlohmann::json{{"embedding_scale", c.embedding_scale}, {"residual_scale", c.residual_scale},
                              {"attention.scale", c.attention_multiplier}, {"logit_scale", c.logit_divisor}};
      },
      // Multipliers far enough from 1 that dropping any one changes the output.
      .synth = [](model_config& c) {
        c.embedding_scale = 2.0, c.residual_scale = 0.5, c.attention_multiplier = 0.25, c.logit_divisor = 2.0;
      },
  };
  return f;
}

}  // namespace troupe::model
