// Qwen2-MoE and Qwen3-MoE (Qwen2MoeForCausalLM, Qwen3MoeForCausalLM): mixtures of SwiGLU
// experts (mlp.experts.E.{gate,up,down}_proj, router mlp.gate) whose top-k probabilities are
// renormalized only with norm_topk_prob; layers in mlp_only_layers, and those off the
// decoder_sparse_step, stay dense. Qwen2-MoE adds a shared expert every token goes through,
// scaled by sigmoid(shared_expert_gate · x), and Qwen2's q/k/v biases; Qwen3-MoE has no shared
// expert and Qwen3's per-head query/key norms.
#include "runtime/model/family.h"

namespace troupe::model {

std::vector<std::pair<std::string, std::string>> qk_norm_layer_tensors();  // qwen3.cpp

namespace {

void read_qwen_moe(const hf_keys& k, model_config& c, bool shared_expert) {
  moe_config m;
  m.num_experts = k.need_int("num_experts");
  m.experts_per_token = k.need_int("num_experts_per_tok");
  m.expert_intermediate_size = k.need_int("moe_intermediate_size");
  if (shared_expert) m.shared_expert_intermediate_size = k.int_or("shared_expert_intermediate_size", 0);
  m.normalize_top_k = k.bool_or("norm_topk_prob", false);
  m.sparse_step = k.int_or("decoder_sparse_step", 1);
  m.mlp_only_layers = k.ints_or("mlp_only_layers", {});
  c.moe = m;
}

void write_qwen_moe(const model_config& c, nlohmann::json& j, bool shared_expert) {
  const auto& m = *c.moe;
  j["num_experts_per_tok"] = m.experts_per_token;
  j["num_experts"] = m.num_experts;
  j["moe_intermediate_size"] = m.expert_intermediate_size;
  j["norm_topk_prob"] = m.normalize_top_k;
  j["decoder_sparse_step"] = m.sparse_step;
  j["mlp_only_layers"] = m.mlp_only_layers;
  if (shared_expert) j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
}

}  // namespace

const family& qwen2_moe_family() {
  static const family f{
      .name = "qwen2_moe",
      .hf_architectures = {"Qwen2MoeForCausalLM"},
      .gguf_architecture = "",
      .layer_tensors = decoder_layer_tensors(),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.attention_bias = true;
        read_qwen_moe(k, c, true);
      },
      .read_gguf = {},
      .write_hf = [](const model_config& c, nlohmann::json& j) { write_qwen_moe(c, j, true); },
  };
  return f;
}

const family& qwen3_moe_family() {
  static const family f{
      .name = "qwen3_moe",
      .hf_architectures = {"Qwen3MoeForCausalLM"},
      .gguf_architecture = "",
      .layer_tensors = qk_norm_layer_tensors(),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.qk_norm = true;
        c.attention_bias = k.bool_or("attention_bias", false);
        read_qwen_moe(k, c, false);
      },
      .read_gguf = {},
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        j["attention_bias"] = c.attention_bias;
        write_qwen_moe(c, j, false);
      },
  };
  return f;
}

}  // namespace troupe::model
