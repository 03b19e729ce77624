#include "runtime/model/family.h"

namespace troupe::model {



const family* family_of_hf(const std::string& architecture) {
  for (const family* f : families())
    for (auto& a : f->hf_architectures)
      if (a == architecture) return f;
  return nullptr;
}

const family* family_of_gguf(const std::string& architecture) {
  for (const family* f : families())
    if (!f->gguf_architecture.empty() && f->gguf_architecture == architecture) return f;
  return nullptr;
}

const family* family_named(const std::string& name) {
  for (const family* f : families())
    if (f->name == name) return f;
  return nullptr;
}

std::string known_hf_architectures() {
  std::string out;
  for (const family* f : families())
    for (auto& a : f->hf_architectures) out += (out.empty() ? "" : ", ") + a;
  return out;
}

std::string known_gguf_architectures() {
  std::string out;
  for (const family* f : families())
    if (!f->gguf_architecture.empty() && family_of_gguf(f->gguf_architecture) == f) out += (out.empty() ? "" : ", ") + f->gguf_architecture;
  return out;
}

std::vector<std::pair<std::string, std::string>> decoder_layer_tensors() {
  return {{"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"}, {"attn_q", "self_attn.q_proj"},
          {"attn_k", "self_attn.k_proj"},   {"attn_v", "self_attn.v_proj"},           {"attn_output", "self_attn.o_proj"},
          {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},                {"ffn_down", "mlp.down_proj"}};
}

std::vector<std::pair<std::string, std::string>> moe_layer_tensors(bool mixtral, bool shared) {
  auto t = decoder_layer_tensors();
  const std::string block = mixtral ? "block_sparse_moe." : "mlp.";
  t.emplace_back("ffn_gate_inp", block + "gate");
  t.emplace_back("ffn_gate_exps", block + "experts.*." + (mixtral ? "w1" : "gate_proj"));
  t.emplace_back("ffn_up_exps", block + "experts.*." + (mixtral ? "w3" : "up_proj"));
  t.emplace_back("ffn_down_exps", block + "experts.*." + (mixtral ? "w2" : "down_proj"));
  if (shared) {
    t.emplace_back("ffn_gate_shexp", "mlp.shared_expert.gate_proj");
    t.emplace_back("ffn_up_shexp", "mlp.shared_expert.up_proj");
    t.emplace_back("ffn_down_shexp", "mlp.shared_expert.down_proj");
    t.emplace_back("ffn_gate_inp_shexp", "mlp.shared_expert_gate");
  }
  return t;
}

}  // namespace troupe::model
