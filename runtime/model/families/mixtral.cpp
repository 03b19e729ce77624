// Mixtral (MixtralForCausalLM): Llama's attention with a mixture of SwiGLU experts in every
// layer (block_sparse_moe.experts.E.w1/w3/w2, router block_sparse_moe.gate), the top-k router
// probabilities renormalized to sum to 1. Its GGUF files are llama ones with llama.expert_count
// and each layer's experts stacked (ffn_gate_exps, ffn_up_exps, ffn_down_exps).
#include "runtime/model/family.h"

namespace troupe::model {

const family& mixtral_family() {
  static const family f{
      .name = "mixtral",
      .hf_architectures = {"MixtralForCausalLM"},
      .gguf_architecture = "llama",  // its GGUF files say llama, with llama.expert_count
      .layer_tensors = moe_layer_tensors(true, false),
      .gguf_interleaves_rope = true,
      .read_hf = [](const hf_keys& k, model_config& c) {
        moe_config m;
        m.layout = moe_layout::mixtral;
        m.num_experts = k.need_int("num_local_experts");
        m.experts_per_token = k.need_int("num_experts_per_tok");
        m.expert_intermediate_size = c.intermediate_size;
        m.normalize_top_k = true;
        c.moe = m;
        c.attention_bias = k.bool_or("attention_bias", false);
      },
      .read_gguf = {},
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        j["num_local_experts"] = c.moe->num_experts;
        j["num_experts_per_tok"] = c.moe->experts_per_token;
        j["attention_bias"] = c.attention_bias;
      },
      .write_gguf = [](const model_config& c) {
        return nlohmann::json{{"expert_count", c.moe->num_experts}, {"expert_used_count", c.moe->experts_per_token}};
      },
  };
  return f;
}

}  // namespace troupe::model
