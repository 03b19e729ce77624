// Qwen2-MoE and Qwen3-MoE (Qwen2MoeForCausalLM, Qwen3MoeForCausalLM): mixtures of SwiGLU
// experts (mlp.experts.E.{gate,up,down}_proj, router mlp.gate) whose top-k probabilities are
// renormalized only with norm_topk_prob; layers in mlp_only_layers, and those off the
// decoder_sparse_step, stay dense. Qwen2-MoE adds a shared expert every token goes through,
// scaled by sigmoid(shared_expert_gate · x), and Qwen2's q/k/v biases; Qwen3-MoE has no shared
// expert and Qwen3's per-head query/key norms. llama.cpp's files (qwen2moe, qwen3moe) make every
// layer sparse and stack each layer's experts into one tensor per projection.
#include "runtime/model/family.h"
#include "runtime/common/error.h"
#include "runtime/model/gguf_import.h"

namespace troupe::model {

std::vector<std::pair<std::string, std::string>> qk_norm_layer_tensors();  // qwen3.cpp

namespace {

// llama.cpp's Qwen-MoE files: every layer sparse, the top-k renormalized for Qwen3-MoE only.
void read_gguf_qwen_moe(const gguf_keys& k, model_config& c, bool qwen3) {
  c.moe = gguf_moe(k, k.need_int("expert_feed_forward_length"), moe_layout::qwen, qwen3);
  if (!c.moe) throw input_error(k.path() + ": metadata '" + k.key("expert_count") + "' is missing; a " + k.architecture() + " file has experts");
  if (!qwen3) c.moe->shared_expert_intermediate_size = k.int_or("expert_shared_feed_forward_length", 0, 0);
}

nlohmann::json write_gguf_qwen_moe(const model_config& c) {
  nlohmann::json j = {{"expert_count", c.moe->num_experts}, {"expert_used_count", c.moe->experts_per_token},
                      {"expert_feed_forward_length", c.moe->expert_intermediate_size}};
  if (c.moe->shared_expert_intermediate_size > 0) j["expert_shared_feed_forward_length"] = c.moe->shared_expert_intermediate_size;
  return j;
}

}  // namespace

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

std::vector<std::pair<std::string, std::string>> qwen3_moe_layer_tensors() {
  auto t = moe_layer_tensors(false, false);
  t.emplace_back("attn_q_norm", "self_attn.q_norm");
  t.emplace_back("attn_k_norm", "self_attn.k_norm");
  return t;
}

const family& qwen2_moe_family() {
  static const family f{
      .name = "qwen2_moe",
      .hf_architectures = {"Qwen2MoeForCausalLM"},
      .gguf_architecture = "qwen2moe",
      .layer_tensors = moe_layer_tensors(false, true),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.attention_bias = true;
        read_qwen_moe(k, c, true);
      },
      .read_gguf = [](const gguf_keys& k, model_config& c) {
        c.attention_bias = true;
        read_gguf_qwen_moe(k, c, false);
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) { write_qwen_moe(c, j, true); },
      .write_gguf = write_gguf_qwen_moe,
  };
  return f;
}

const family& qwen3_moe_family() {
  static const family f{
      .name = "qwen3_moe",
      .hf_architectures = {"Qwen3MoeForCausalLM"},
      .gguf_architecture = "qwen3moe",
      .layer_tensors = qwen3_moe_layer_tensors(),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.qk_norm = true;
        c.attention_bias = k.bool_or("attention_bias", false);
        read_qwen_moe(k, c, false);
      },
      .read_gguf = [](const gguf_keys& k, model_config& c) {
        c.qk_norm = true;
        read_gguf_qwen_moe(k, c, true);
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        j["attention_bias"] = c.attention_bias;
        write_qwen_moe(c, j, false);
      },
      .write_gguf = write_gguf_qwen_moe,
  };
  return f;
}

}  // namespace troupe::model
