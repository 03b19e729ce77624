// Gemma 2 and Gemma 3 (text: Gemma2ForCausalLM, Gemma3ForCausalLM). Llama's attention and MLP
// shapes with these differences, each a recipe field of model_config:
//   - token embeddings scaled by sqrt(hidden);
//   - RMSNorm by (1 + weight): the folders store weight - 1 (norm_offset 1), llama.cpp's
//     converter stores the sum (offset 0 in GGUF);
//   - four norms a layer: before and after attention, before and after the MLP (Hugging Face's
//     post_attention_layernorm is on the attention's output, pre_/post_feedforward_layernorm
//     around the MLP; GGUF's attn_norm, post_attention_norm, ffn_norm, post_ffw_norm);
//   - GeGLU with the tanh GELU;
//   - scores scaled by 1 / sqrt(query_pre_attn_scalar);
//   - tied embeddings unless the config says otherwise;
//   - Gemma 2: interleaved sliding-window (even layers) and global layers; attention and final
//     logit soft caps;
//   - Gemma 3: five sliding-window layers to one global (layer_types, or sliding_window_pattern
//     6); the windowed layers use RoPE base rope_local_base_freq (10000) unscaled, the global
//     ones rope_theta with rope_scaling; Qwen3-style query/key norms (also by 1 + weight).
// llama.cpp runs Gemma with NEOX RoPE, so GGUF rows are in Hugging Face's order. It takes the
// score scale from the model's size rather than a key: 1 / sqrt(hidden / heads) for the 27B
// models (46 layers for Gemma 2, 62 for Gemma 3), 1 / sqrt(head_dim) otherwise; reading a GGUF
// file does the same.
#include <cmath>

#include "runtime/common/error.h"
#include "runtime/model/family.h"

namespace troupe::model {

namespace {

std::vector<std::pair<std::string, std::string>> gemma_layer_tensors(bool qk_norm) {
  std::vector<std::pair<std::string, std::string>> t = {
      {"attn_norm", "input_layernorm"},  {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"}, {"post_ffw_norm", "post_feedforward_layernorm"},
      {"attn_q", "self_attn.q_proj"},    {"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  if (qk_norm) t.insert(t.end(), {{"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"}});
  return t;
}

// The recipe both generations share; `global_every`: one global layer in so many (2: Gemma 2's
// even layers windowed; 6: Gemma 3's five of six).
void gemma_recipe(model_config& c, int global_every) {
  c.embedding_scale = std::sqrt(double(c.hidden_size));
  c.gelu_mlp = true;
  c.layer_norms = model_config::norms::sandwich;
  c.layer_windows.assign(std::size_t(c.num_hidden_layers), 0);
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if ((l + 1) % global_every != 0) c.layer_windows[std::size_t(l)] = c.sliding_window;
}

void read_hf_gemma(const hf_keys& k, model_config& c, int generation) {
  const std::string act = k.has("hidden_activation") ? k.text_or("hidden_activation", "") : k.text_or("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    throw input_error(k.source() + ": 'hidden_activation' is '" + act + "'; Gemma's tanh GELU (gelu_pytorch_tanh) is built");
  c.tie_word_embeddings = k.bool_or("tie_word_embeddings", true);
  c.norm_offset = 1.0f;
  c.attention_scalar = k.real_or("query_pre_attn_scalar", double(c.head_dim));
  c.attn_softcap = k.real_or("attn_logit_softcapping", 0.0);
  c.final_softcap = k.real_or("final_logit_softcapping", 0.0);
  if (c.sliding_window <= 0) throw input_error(k.source() + ": missing key 'sliding_window' (Gemma's local layers attend to a window)");
  gemma_recipe(c, generation == 2 ? 2 : k.int_or("sliding_window_pattern", 6));
  if (generation == 3) {
    c.qk_norm = true;
    c.local_rope_theta = k.real_or("rope_local_base_freq", 10000.0);
    if (k.has("layer_types")) {  // newer configs list each layer's kind
      const auto& types = k.object().at("layer_types");
      if (!types.is_array() || types.size() != std::size_t(c.num_hidden_layers))
        throw input_error(k.source() + ": 'layer_types' must list one kind per layer");
      for (std::size_t l = 0; l < types.size(); ++l) {
        const std::string kind = types[l].is_string() ? types[l].get<std::string>() : "";
        if (kind != "sliding_attention" && kind != "full_attention")
          throw input_error(k.source() + ": 'layer_types' holds " + types[l].dump() + "; sliding_attention and full_attention are built");
        c.layer_windows[l] = kind == "sliding_attention" ? c.sliding_window : 0;
      }
    }
  }
}

void read_gguf_gemma(const gguf_keys& k, model_config& c, int generation) {
  c.sliding_window = k.need_int("attention.sliding_window");
  c.norm_offset = 0.0f;  // the converter stored 1 + weight
  const bool big = c.num_hidden_layers == (generation == 2 ? 46 : 62);  // the 27B models
  c.attention_scalar = big ? double(c.hidden_size) / c.num_attention_heads : double(c.head_dim);
  c.attn_softcap = k.real_or("attn_logit_softcapping", 0.0);
  c.final_softcap = k.real_or("final_logit_softcapping", 0.0);
  gemma_recipe(c, generation == 2 ? 2 : 6);
  if (generation == 3) {
    c.qk_norm = true;
    c.local_rope_theta = 10000.0;  // llama.cpp's, for every Gemma 3
  }
}

void write_hf_gemma(const model_config& c, nlohmann::json& j, int generation) {
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["query_pre_attn_scalar"] = c.attention_scalar;
  if (c.attn_softcap > 0) j["attn_logit_softcapping"] = c.attn_softcap;
  if (c.final_softcap > 0) j["final_logit_softcapping"] = c.final_softcap;
  if (generation == 3) {
    j["rope_local_base_freq"] = c.local_rope_theta;
    nlohmann::json types = nlohmann::json::array();
    for (int w : c.layer_windows) types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
}

nlohmann::json write_gguf_gemma(const model_config& c) {
  nlohmann::json j = {{"attention.sliding_window", c.sliding_window}};
  if (c.attn_softcap > 0) j["attn_logit_softcapping"] = c.attn_softcap;
  if (c.final_softcap > 0) j["final_logit_softcapping"] = c.final_softcap;
  return j;
}

// A synthesized Gemma: a window the tests' sequences pass, and (Gemma 2) caps low enough that
// dropping one changes the output: a random model's scores and logits stay far below the real
// models' 50 and 30.
void synth_gemma(model_config& c, int generation) {
  c.sliding_window = 32;
  c.attention_scalar = c.head_dim;
  if (generation == 2) c.attn_softcap = 1.5, c.final_softcap = 8.0;
  if (generation == 3) c.local_rope_theta = 10000.0, c.rope_theta = 1000000.0;
  c.norm_offset = 1.0f;
  c.tie_word_embeddings = true;
  gemma_recipe(c, generation == 2 ? 2 : 6);
  if (generation == 3) c.qk_norm = true;
}

}  // namespace

const family& gemma2_family() {
  static const family f{
      .name = "gemma2",
      .hf_architectures = {"Gemma2ForCausalLM"},
      .gguf_architecture = "gemma2",
      .layer_tensors = gemma_layer_tensors(false),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) { read_hf_gemma(k, c, 2); },
      .read_gguf = [](const gguf_keys& k, model_config& c) { read_gguf_gemma(k, c, 2); },
      .write_hf = [](const model_config& c, nlohmann::json& j) { write_hf_gemma(c, j, 2); },
      .write_gguf = write_gguf_gemma,
      .synth = [](model_config& c) { synth_gemma(c, 2); },
  };
  return f;
}

const family& gemma3_family() {
  static const family f{
      .name = "gemma3",
      .hf_architectures = {"Gemma3ForCausalLM"},
      .gguf_architecture = "gemma3",
      .layer_tensors = gemma_layer_tensors(true),
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys& k, model_config& c) { read_hf_gemma(k, c, 3); },
      .read_gguf = [](const gguf_keys& k, model_config& c) { read_gguf_gemma(k, c, 3); },
      .write_hf = [](const model_config& c, nlohmann::json& j) { write_hf_gemma(c, j, 3); },
      .write_gguf = write_gguf_gemma,
      .synth = [](model_config& c) { synth_gemma(c, 3); },
  };
  return f;
}

}  // namespace troupe::model
