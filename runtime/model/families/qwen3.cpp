// Qwen3 dense (Qwen3ForCausalLM): Llama's layers with an RMSNorm over each query and key head
// before RoPE (q_norm, k_norm: [head_dim] each, shared by the heads), no projection biases, and a
// head size given apart from hidden / heads (128 throughout the family). NEOX RoPE in llama.cpp,
// so GGUF rows are in Hugging Face's order; the norms are blk.N.attn_{q,k}_norm.
#include "runtime/model/family.h"

namespace troupe::model {

std::vector<std::pair<std::string, std::string>> qk_norm_layer_tensors() {
  auto t = decoder_layer_tensors();
  t.emplace_back("attn_q_norm", "self_attn.q_norm");
  t.emplace_back("attn_k_norm", "self_attn.k_norm");
  return t;
}

const family& qwen3_family() {
  static const family f{
      .name = "qwen3",
      .hf_architectures = {"Qwen3ForCausalLM"},
      .gguf_architecture = "qwen3",
      .layer_tensors = qk_norm_layer_tensors(),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.qk_norm = true;
        c.attention_bias = k.bool_or("attention_bias", false);
      },
      .read_gguf = [](const gguf_keys&, model_config& c) { c.qk_norm = true; },
      .write_hf = [](const model_config& c, nlohmann::json& j) { j["attention_bias"] = c.attention_bias; },
  };
  return f;
}

}  // namespace troupe::model
