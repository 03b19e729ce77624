#include "runtime/model/config_json.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/model/family.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/rope_scaling.h"
#include "runtime/common/json.h"

namespace troupe::model {

using nlohmann::json;


std::vector<int> eos_ids_of(const json& e, const std::string& source) {
  std::vector<int> out;
  if (e.is_null()) return out;
  if (e.is_number_integer()) out.push_back(json_int(e, "eos_token_id", source));
  else if (e.is_array())
    for (auto& x : e) out.push_back(json_int(x, "eos_token_id", source));
  else
    throw input_error(source + ": key 'eos_token_id' has the wrong type (" + e.dump() + ")");
  return out;
}

namespace {

// quantization_config: only what `troupe model quantize` writes.
void read_quantization(const json& j, const std::string& source, model_config& c) {
  if (auto q = j.find("quantization_config"); q != j.end() && !q->is_null()) {
    const std::string where = source + ": quantization_config";
    if (!q->is_object()) throw input_error(where + " must be an object");
    const auto method = q->find("quant_method");
    if (method == q->end() || !method->is_string() || method->get<std::string>() != "troupe")
      throw input_error(where + ".quant_method " + (method == q->end() ? std::string("is missing") : "is " + method->dump()) +
                        "; only \"troupe\" (written by `troupe model quantize`) is supported");
    const auto type = q->find("weight_type");
    const std::string name = type != q->end() && type->is_string() ? type->get<std::string>() : "";
    const auto parsed = kernels::parse_quant_type(name);
    const auto& mixes = gguf_mixes();
    const bool mix = !parsed && std::find(mixes.begin(), mixes.end(), name) != mixes.end();
    if (!parsed && !mix)
      throw input_error(where + ".weight_type must be \"q8_0\", \"q4_0\", \"int8\" or a mix: \"q2_k\", \"q3_k_m\", \"q4_k_m\", "
                                "\"q5_k_m\", \"q6_k\", \"iq4_xs\"");
    for (auto& [key, value] : q->items())
      if (key != "quant_method" && key != "weight_type") throw input_error(where + ": unknown key '" + key + "'");
    c.weight_quant = parsed;
    if (mix) c.weight_mix = name;
  }
}

}  // namespace

void check_model_config(const std::string& source, const model_config& c) {
  auto positive_real = [&](double v, const char* key) {
    if (!(v > 0) || !std::isfinite(v)) throw input_error(source + ": '" + key + "' must be a positive number, got " + std::to_string(v));
  };
  positive_real(c.rope_theta, "rope_theta");
  positive_real(c.rms_norm_eps, "rms_norm_eps");
  check_rope_scaling(source, c);
  auto positive = [&](int v, const char* key) {
    if (v <= 0) throw input_error(source + ": '" + key + "' must be positive, got " + std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  if (c.moe) {
    const auto& m = *c.moe;
    positive(m.num_experts, "num_experts");
    positive(m.experts_per_token, "num_experts_per_tok");
    positive(m.expert_intermediate_size, m.layout == moe_layout::mixtral ? "intermediate_size" : "moe_intermediate_size");
    positive(m.sparse_step, "decoder_sparse_step");
    if (m.shared_expert_intermediate_size < 0) positive(m.shared_expert_intermediate_size, "shared_expert_intermediate_size");
    if (m.experts_per_token > m.num_experts)
      throw input_error(source + ": num_experts_per_tok (" + std::to_string(m.experts_per_token) + ") exceeds the " +
                        std::to_string(m.num_experts) + " experts");
    for (int l : m.mlp_only_layers)
      if (l < 0 || l >= c.num_hidden_layers)
        throw input_error(source + ": mlp_only_layers names layer " + std::to_string(l) + ", the model has " +
                          std::to_string(c.num_hidden_layers));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw input_error(source + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                      ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) + ")");
  if (c.head_dim % 16 != 0 || c.head_dim > 256)
    throw input_error(source + ": head_dim " + std::to_string(c.head_dim) + " is not supported (a multiple of 16, at most 256)");
  if (c.num_attention_heads / c.num_key_value_heads > 16)
    throw input_error(source + ": more than 16 query heads per KV head is not supported");
  if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    throw input_error(source + ": RoPE rotates " + std::to_string(c.rotary_dim) + " dimensions of each head; it needs an even number, at most head_dim " +
                      std::to_string(c.head_dim));
  if (!c.rope_freq_factors.empty()) {
    if (c.rope_freq_factors.size() != std::size_t(c.rotated_dims() / 2))
      throw input_error(source + ": 'rope_freqs' has " + std::to_string(c.rope_freq_factors.size()) + " factors, expected one per rotated pair, " +
                        std::to_string(c.rotated_dims() / 2));
    for (double f : c.rope_freq_factors) positive_real(f, "rope_freqs");
  }
  if (c.sliding_window < 0) positive(c.sliding_window, "sliding_window");
  if (!c.layer_windows.empty() && c.layer_windows.size() != std::size_t(c.num_hidden_layers))
    throw input_error(source + ": " + std::to_string(c.layer_windows.size()) + " layer windows for " + std::to_string(c.num_hidden_layers) +
                      " layers");
  for (double v : {c.attention_scalar, c.attn_softcap, c.final_softcap, c.local_rope_theta})
    if (!(v >= 0) || !std::isfinite(v)) throw input_error(source + ": a scale or soft cap is " + std::to_string(v) + "; it must be finite and not negative");
  positive_real(c.embedding_scale, "embedding_scale");
  positive_real(c.residual_scale, "residual_multiplier");
  positive_real(c.logit_divisor, "logits_scaling");
  if (!(c.attention_multiplier >= 0) || !std::isfinite(c.attention_multiplier))
    throw input_error(source + ": 'attention_multiplier' must be a finite number, not negative");
  if (!c.layer_rope.empty() && c.layer_rope.size() != std::size_t(c.num_hidden_layers))
    throw input_error(source + ": " + std::to_string(c.layer_rope.size()) + " RoPE flags for " + std::to_string(c.num_hidden_layers) + " layers");
}

model_config parse_model_config(const std::string& text, const std::string& source) {
  const json j = parse_json(text, source);
  if (!j.is_object()) throw input_error(source + ": expected a JSON object");
  const hf_keys k(j, source);
  model_config c;
  if (!j.contains("architectures")) throw input_error(source + ": missing key 'architectures'");
  const json& archs = j["architectures"];
  if (!archs.is_array() || !std::all_of(archs.begin(), archs.end(), [](const json& a) { return a.is_string(); }))
    throw input_error(source + ": key 'architectures' has the wrong type (" + archs.dump() + ")");
  if (archs.empty()) throw input_error(source + ": 'architectures' is empty");
  c.architecture = archs[0].get<std::string>();
  const family* fam = family_of_hf(c.architecture);
  if (!fam) throw input_error(source + ": unsupported architecture '" + c.architecture + "' (supported: " + known_hf_architectures() + ")");
  c.family = fam->name;
  c.vocab_size = k.need_int("vocab_size");
  c.hidden_size = k.need_int("hidden_size");
  c.intermediate_size = k.need_int("intermediate_size");
  c.num_hidden_layers = k.need_int("num_hidden_layers");
  c.num_attention_heads = k.need_int("num_attention_heads");
  c.num_key_value_heads = k.int_or("num_key_value_heads", c.num_attention_heads);
  c.head_dim = k.int_or("head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.max_position_embeddings = k.int_or("max_position_embeddings", 4096);
  c.rms_norm_eps = k.real_or("rms_norm_eps", 1e-6);
  c.rope_theta = k.real_or("rope_theta", 10000.0);
  c.tie_word_embeddings = k.bool_or("tie_word_embeddings", false);
  if (k.has("sliding_window") && k.bool_or("use_sliding_window", true)) c.sliding_window = k.need_int("sliding_window");
  read_quantization(j, source, c);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = k.need_int("bos_token_id");
  if (j.contains("eos_token_id")) c.eos_token_ids = eos_ids_of(j["eos_token_id"], source);
  read_rope_scaling(j, source, c);
  if (fam->read_hf) fam->read_hf(k, c);
  check_model_config(source, c);
  return c;
}

namespace {

std::string family_of(const model_config& c) {
  const family* f = c.family.empty() ? family_of_hf(c.architecture) : family_named(c.family);
  return f ? f->name : "llama";
}

}  // namespace

std::string to_config_json(const model_config& c) {
  json j = {
      {"architectures", {c.architecture}},
      {"model_type", family_of(c)},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", c.gelu_mlp ? "gelu_pytorch_tanh" : "silu"},
  };
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (const family* f = family_named(family_of(c)); f && f->write_hf) f->write_hf(c, j);
  if (c.weight_quant) j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", kernels::quant_name(*c.weight_quant)}};
  if (!c.weight_mix.empty()) j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", c.weight_mix}};
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.rope_scaling) j["rope_scaling"] = rope_scaling_json(*c.rope_scaling);
  if (c.rotated_dims() != c.head_dim) j["partial_rotary_factor"] = double(c.rotary_dim) / c.head_dim;
  return j.dump(2) + "\n";
}

}  // namespace troupe::model
