// OLMo 2 (Olmo2ForCausalLM): Llama's layers with the norms moved after the sublayers (no norm
// before attention or the MLP: post_attention_layernorm and post_feedforward_layernorm on their
// outputs, before the residual), and q_norm/k_norm over each whole query and key projection
// ([q_dim], [kv_dim]) rather than per head, so a tensor-parallel rank cannot norm its part alone.
// NEOX RoPE in llama.cpp: GGUF rows in Hugging Face's order, no attn_norm or ffn_norm there.
#include "runtime/model/family.h"

namespace troupe::model {

const family& olmo2_family() {
  static const family f{
      .name = "olmo2",
      .hf_architectures = {"Olmo2ForCausalLM"},
      .gguf_architecture = "olmo2",
      .layer_tensors = {{"post_attention_norm", "post_attention_layernorm"}, {"post_ffw_norm", "post_feedforward_layernorm"},
                        {"attn_q", "self_attn.q_proj"},   {"attn_k", "self_attn.k_proj"},     {"attn_v", "self_attn.v_proj"},
                        {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
                        {"ffn_gate", "mlp.gate_proj"},    {"ffn_up", "mlp.up_proj"},          {"ffn_down", "mlp.down_proj"}},
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.layer_norms = model_config::norms::post;
        c.qk_norm = c.qk_norm_whole = true;
        c.attention_bias = k.bool_or("attention_bias", false);
      },
      .read_gguf = [](const gguf_keys&, model_config& c) {
        c.layer_norms = model_config::norms::post;
        c.qk_norm = c.qk_norm_whole = true;
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) { j["attention_bias"] = c.attention_bias; },
      .write_gguf = {},
      .synth = [](model_config& c) {
        c.layer_norms = model_config::norms::post;
        c.qk_norm = c.qk_norm_whole = true;
      },
  };
  return f;
}

}  // namespace troupe::model
