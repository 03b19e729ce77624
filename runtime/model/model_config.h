// The architecture hyper-parameters of a Hugging Face model folder (config.json).
#pragma once
#include <optional>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace troupe::model {

// Llama-3 style frequency-dependent RoPE scaling ("rope_type": "llama3"), or plain linear.
struct rope_scaling_config {
  std::string type;  // "llama3" or "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct model_config {
  std::string architecture;  // LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
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
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }
  // RoPE inverse frequencies (head_dim / 2 of them) with rope_scaling applied, in double.
  std::vector<double> rope_inv_freq() const;
};

// Reads and validates `dir`/config.json, with the end-of-sequence ids of
// generation_config.json added when the folder has one. Throws input_error naming the file and
// the key for a missing or ill-typed key, an unsupported architecture or inconsistent sizes.
model_config load_model_config(const std::string& dir);

// eos_token_id as Hugging Face writes it: an id, a list of ids, or null.
std::vector<int> eos_ids_of(const nlohmann::json& v, const std::string& source);

// Parses config.json text; `source` names it in errors.
model_config parse_model_config(const std::string& text, const std::string& source);

// The config.json text for `c` (what the model synthesizer writes).
std::string to_config_json(const model_config& c);

}  // namespace troupe::model
