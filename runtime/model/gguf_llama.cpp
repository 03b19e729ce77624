#include "runtime/model/gguf_llama.h"

#include <filesystem>
#include <cmath>
#include <cstring>
#include <regex>

#include "runtime/common/error.h"

namespace troupe::model {

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && !std::filesystem::is_directory(path);
}

namespace {

const nlohmann::json* find(const gguf_file& g, const std::string& key) {
  auto it = g.metadata().find(key);
  return it == g.metadata().end() ? nullptr : &*it;
}

int int_key(const gguf_file& g, const std::string& key, std::optional<int> fallback = std::nullopt, std::int64_t least = 1) {
  const nlohmann::json* v = find(g, key);
  if (!v) {
    if (fallback) return *fallback;
    throw input_error(g.path() + ": metadata '" + key + "' is missing");
  }
  if (!v->is_number_integer() || v->get<std::int64_t>() < least || v->get<std::int64_t>() > (std::int64_t(1) << 30))
    throw input_error(g.path() + ": metadata '" + key + "' must be an integer of at least " + std::to_string(least) + ", not " + v->dump());
  return int(v->get<std::int64_t>());
}

double float_key(const gguf_file& g, const std::string& key, double fallback) {
  const nlohmann::json* v = find(g, key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    throw input_error(g.path() + ": metadata '" + key + "' must be a finite number, not " + v->dump());
  return v->get<double>();
}

}  // namespace

model_config gguf_llama_config(const gguf_file& g) {
  const nlohmann::json* arch = find(g, "general.architecture");
  if (!arch || !arch->is_string()) throw input_error(g.path() + ": metadata 'general.architecture' is missing");
  if (arch->get<std::string>() != "llama")
    throw input_error(g.path() + ": general.architecture is '" + arch->get<std::string>() + "'; GGUF import reads 'llama'");
  if (const auto* s = find(g, "llama.rope.scaling.type"); s && !(s->is_string() && s->get<std::string>() == "none"))
    throw input_error(g.path() + ": metadata 'llama.rope.scaling.type' is " + s->dump() + "; RoPE scaling from GGUF is not supported");
  if (find(g, "llama.expert_count") && int_key(g, "llama.expert_count", 1) > 1)
    throw input_error(g.path() + ": metadata 'llama.expert_count': mixture-of-experts GGUF files are not supported");
  model_config c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = int_key(g, "llama.embedding_length");
  c.intermediate_size = int_key(g, "llama.feed_forward_length");
  c.num_hidden_layers = int_key(g, "llama.block_count");
  c.num_attention_heads = int_key(g, "llama.attention.head_count");
  c.num_key_value_heads = int_key(g, "llama.attention.head_count_kv", c.num_attention_heads);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (find(g, "llama.rope.dimension_count") && int_key(g, "llama.rope.dimension_count") != c.head_dim)
    throw input_error(g.path() + ": metadata 'llama.rope.dimension_count' is not the head size " + std::to_string(c.head_dim) +
                      "; partial rotary embeddings are not supported");
  c.max_position_embeddings = int_key(g, "llama.context_length", 4096);
  c.rms_norm_eps = float_key(g, "llama.attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = float_key(g, "llama.rope.freq_base", 10000.0);
  const auto& t = g.tensors();
  auto embd = t.find("token_embd.weight");
  if (embd == t.end()) throw input_error(g.path() + ": tensor 'token_embd.weight' is missing");
  c.vocab_size = int(embd->second.shape[0]);
  if (const auto* tokens = find(g, "tokenizer.ggml.tokens"); tokens && tokens->is_array() && int(tokens->size()) != c.vocab_size)
    throw input_error(g.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens->size()) + " tokens but token_embd.weight has " +
                      std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = t.find("output.weight") == t.end();
  if (find(g, "tokenizer.ggml.bos_token_id")) c.bos_token_id = int_key(g, "tokenizer.ggml.bos_token_id", 0, 0);
  if (find(g, "tokenizer.ggml.eos_token_id")) c.eos_token_ids = {int_key(g, "tokenizer.ggml.eos_token_id", 0, 0)};
  check_model_config(g.path(), c);
  return c;
}

std::vector<tensor_info> gguf_llama_tensors(const gguf_file& g, const model_config& c,
                                            std::vector<std::vector<std::uint8_t>>& storage) {
  static const std::regex layer(R"(blk\.(\d+)\.(\w+)\.weight)");
  static const std::map<std::string, std::string> per_layer = {
      {"attn_norm", "input_layernorm"},   {"ffn_norm", "post_attention_layernorm"}, {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},     {"attn_v", "self_attn.v_proj"},           {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},      {"ffn_up", "mlp.up_proj"},                {"ffn_down", "mlp.down_proj"}};
  std::vector<tensor_info> out;
  for (const auto& [name, t] : g.tensors()) {
    tensor_info i;
    std::smatch m;
    if (name == "token_embd.weight") i.name = "model.embed_tokens.weight";
    else if (name == "output_norm.weight") i.name = "model.norm.weight";
    else if (name == "output.weight") i.name = "lm_head.weight";
    else if (std::regex_match(name, m, layer) && per_layer.count(m[2].str()))
      i.name = "model.layers." + m[1].str() + "." + per_layer.at(m[2].str()) + ".weight";
    else
      throw input_error(g.path() + ": tensor '" + name + "' is not part of a llama model this loader knows");
    i.file = g.path() + " (GGUF tensor '" + name + "')";
    i.data = t.data;
    i.bytes = t.bytes;
    i.shape = t.shape;
    switch (t.type) {
      case ggml_type::f32: i.dtype_name = "F32"; break;
      case ggml_type::f16: i.dtype_name = "F16"; break;
      case ggml_type::bf16: i.dtype_name = "BF16"; break;
      case ggml_type::q8_0:
      case ggml_type::q4_0:
        i.dtype_name = "U8";
        i.quant = t.type == ggml_type::q8_0 ? kernels::quant_type::q8_0 : kernels::quant_type::q4_0;
        i.shape.back() = std::int64_t(kernels::quant_row_bytes(*i.quant, std::size_t(t.shape.back())));
        break;
      default:  // the K-quants and IQ4_XS (the only other types gguf_file accepts)
        i.dtype_name = "U8";
        i.kquant = kernels::kquant_of_ggml(std::uint32_t(t.type));
        i.shape.back() = std::int64_t(std::size_t(t.shape.back()) / kernels::kquant_block * kernels::kquant_block_bytes(*i.kquant));
        break;
    }
    // llama.cpp stores each head's rows as (rotary pair, half) where Hugging Face has (half,
    // pair): row h*d + 2j + s there is row h*d + s*d/2 + j here.
    const bool q = m.size() > 2 && m[2].str() == "attn_q", k = m.size() > 2 && m[2].str() == "attn_k";
    if ((q || k) && i.shape.size() == 2) {
      const int heads = q ? c.num_attention_heads : c.num_key_value_heads, d = c.head_dim;
      if (i.shape[0] != std::int64_t(heads) * d)
        throw input_error(i.file + ": has " + std::to_string(i.shape[0]) + " rows, expected " + std::to_string(heads * d));
      const std::size_t row = i.bytes / std::size_t(i.shape[0]);
      auto& buf = storage.emplace_back(i.bytes);
      for (int h = 0; h < heads; ++h)
        for (int s = 0; s < 2; ++s)
          for (int j = 0; j < d / 2; ++j)
            std::memcpy(buf.data() + std::size_t(h * d + s * d / 2 + j) * row, t.data + std::size_t(h * d + 2 * j + s) * row, row);
      i.data = buf.data();
    }
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace troupe::model
