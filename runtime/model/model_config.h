// The architecture hyper-parameters of a model however it was read (config.json: config_json.h;
// GGUF metadata: gguf_import.h), and the recipe its family sets (family.h).
#pragma once
#include <optional>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/quant.h"
#include "runtime/model/pooling.h"

namespace troupe::model {

// RoPE scaling (rope_scaling.h): Llama 3's frequency-dependent one ("llama3"), plain "linear",
// Phi-3's "longrope": a divisor per frequency, the long ones when the model's context passes the
// original (the choice is fixed per model, as llama.cpp fixes it per context: the cache holds
// keys rotated once), and every rotation scaled by attention_factor; or "yarn".
struct rope_scaling_config {
  std::string type;  // "llama3", "linear", "longrope" or "yarn"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
  std::vector<double> short_factor, long_factor;  // longrope: [rotated_dims() / 2] each
  double attention_factor = 1.0;                  // longrope, yarn: cos and sin multiplied by this
  double beta_fast = 32.0, beta_slow = 1.0;       // yarn: the ramp's ends, in rotations over the original context
};

// A mixture-of-experts MLP: each token goes to `experts_per_token` of `num_experts` experts
// (SwiGLU MLPs of `expert_intermediate_size` features), chosen by a router whose softmax
// probabilities weigh the experts' outputs. The families differ in the details:
// - Mixtral: every layer; the top-k probabilities renormalized to sum to 1.
// - Qwen2-MoE: renormalized only with norm_topk_prob; a shared expert every token goes through,
//   scaled by sigmoid(shared_expert_gate · x); layers in mlp_only_layers, and those off the
//   decoder_sparse_step, stay dense (intermediate_size).
// - Qwen3-MoE: like Qwen2-MoE without the shared expert.
enum class moe_layout { qwen, mixtral };  // tensor names: mlp.experts.E.gate_proj or block_sparse_moe.experts.E.w1

struct moe_config {
  moe_layout layout = moe_layout::qwen;
  int num_experts = 0;
  int experts_per_token = 0;
  int expert_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool normalize_top_k = false;
  int sparse_step = 1;
  std::vector<int> mlp_only_layers;
};

struct model_config {
  std::string architecture;  // config.json's (LlamaForCausalLM, Qwen3ForCausalLM, ...); a GGUF file's family's first
  std::string family;        // the registry's name of it (family.h): llama, qwen3, ...
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // hidden_size / num_attention_heads unless given
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<rope_scaling_config> rope_scaling;
  // How many of each head's dimensions RoPE rotates, the first ones (Phi-4-mini's
  // partial_rotary_factor 0.75 of head_dim; GGUF's rope.dimension_count); 0: all of head_dim.
  int rotary_dim = 0;
  // Divisors of each RoPE frequency ([rotated_dims() / 2]), as llama.cpp's converter writes a scaling
  // into a GGUF file (rope_freqs.weight); empty: none. Applied after rope_scaling.
  std::vector<double> rope_freq_factors;
  // Each layer attends to the last `sliding_window` positions only (0: to all of them), or,
  // with layer_windows, the layers whose entry is not 0.
  int sliding_window = 0;
  std::vector<int> layer_windows;  // [layers]: each layer's window (0: global); empty: sliding_window for all

  // The layer recipe beyond Llama's, as the families set it (family.h); the forward composes
  // its blocks from these and never asks the family's name.
  float norm_offset = 0.0f;       // RMSNorms scale by (offset + weight): Gemma's folders store weight - 1
  double embedding_scale = 1.0;   // token embeddings are multiplied by this (Gemma: sqrt(hidden))
  bool gelu_mlp = false;          // the MLP's gate is GELU (tanh approximation; GeGLU), not SiLU
  // Where a layer's RMSNorms sit: before attention and MLP (Llama), before and after both
  // (Gemma 2/3), or after both only (OLMo2).
  enum class norms { pre, sandwich, post } layer_norms = norms::pre;
  bool qk_norm_whole = false;     // q_norm/k_norm span the whole projection, not each head (OLMo2)
  double residual_scale = 1.0;    // sublayer outputs scaled before they join the residual (Granite)
  double attention_multiplier = 0.0;  // the scores' scale itself, over attention_scalar (Granite)
  double logit_divisor = 1.0;     // logits divided by this (Granite's logits_scaling)
  std::vector<int> layer_rope;    // [layers]: 0 where a layer applies no RoPE (SmolLM3); empty: RoPE everywhere
  bool fused_projections = false; // qkv_proj and gate_up_proj stored as one tensor each (Phi-3)
  double attention_scalar = 0.0;  // scores scaled by 1 / sqrt(this) (Gemma's query_pre_attn_scalar); 0: head_dim
  double attn_softcap = 0.0;      // scores soft-capped: c * tanh(s / c) (Gemma 2); 0: none
  double final_softcap = 0.0;     // the same on the logits
  double local_rope_theta = 0.0;  // the RoPE base of windowed layers, unscaled (Gemma 3); 0: as the others
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // an RMSNorm over each query and key head before RoPE (Qwen3)
  std::optional<moe_config> moe;  // a mixture-of-experts model (see moe_config)
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;
  // The attention and MLP projections are stored quantized (config.json's quantization_config
  // {"quant_method": "troupe", "weight_type": "q8_0" | "q4_0" | "int8"}; docs/quantization.md).
  // Embeddings, norms and the LM head stay plain. Any other quantization_config is refused.
  std::optional<kernels::quant_type> weight_quant;
  // Or they are stored in one of llama.cpp's mixes ("weight_type": "q4_k_m", "q6_k", ...; see
  // model/gguf_mix.h), each projection's format named in its safetensors file's metadata.
  std::string weight_mix;
  // An embedding model: how its hidden states become one vector (the folder's modules.json,
  // pooling.h). Unset: the model computes no embeddings.
  std::optional<pooling_config> pooling;

  // Layer l's MLP is a mixture of experts (else dense, of intermediate_size).
  bool is_moe_layer(int l) const;
  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  int rotated_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // RoPE inverse frequencies (rotated_dims() / 2 of them) with rope_scaling applied, in double; with
  // `local`, those of the windowed layers (local_rope_theta, unscaled, when set). Defined with
  // the scalings, in rope_scaling.cpp.
  std::vector<double> rope_inv_freq(bool local = false) const;
  // What every rotation is scaled by (longrope's attention_factor; else 1).
  double rope_magnitude() const {
    return rope_scaling && (rope_scaling->type == "longrope" || rope_scaling->type == "yarn") ? rope_scaling->attention_factor : 1.0;
  }
  // Layer l's window (0: it attends to every position).
  int window_of(int l) const {
    return layer_windows.empty() ? sliding_window : layer_windows[std::size_t(l)];
  }
};

}  // namespace troupe::model
