#include "runtime/model/gguf_import.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "runtime/common/error.h"
#include "runtime/model/family.h"
#include "runtime/model/config_json.h"

namespace troupe::model {

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && !std::filesystem::is_directory(path);
}

namespace {

const family& family_of(const gguf_file& g) {
  auto arch = g.metadata().find("general.architecture");
  if (arch == g.metadata().end() || !arch->is_string()) throw input_error(g.path() + ": metadata 'general.architecture' is missing");
  const family* f = family_of_gguf(arch->get<std::string>());
  if (!f)
    throw input_error(g.path() + ": general.architecture is '" + arch->get<std::string>() + "'; GGUF import reads " +
                      known_gguf_architectures());
  return *f;
}

// RoPE scaling as llama.cpp's converter writes it: rope.scaling.type linear or yarn (with its
// factor and original context), or a llama3-style scaling baked into rope_freqs.weight, one
// divisor per frequency.
void read_rope(const gguf_keys& k, model_config& c) {
  c.rope_theta = k.real_or("rope.freq_base", 10000.0);
  if (const auto type = k.text("rope.scaling.type"); type && *type != "none") {
    if (*type != "linear" && *type != "yarn")
      throw input_error(k.path() + ": metadata '" + k.key("rope.scaling.type") + "' is '" + *type +
                        "'; RoPE scalings read from GGUF: none, linear, yarn (and llama3's, as rope_freqs.weight)");
    rope_scaling_config s;
    s.type = *type;
    s.factor = k.real_or("rope.scaling.factor", 1.0);
    if (*type == "yarn") {  // llama.cpp's defaults: the ramp over 32..1 rotations, attention factor 0.1 ln(factor) + 1
      s.original_max_position_embeddings = k.need_int("rope.scaling.original_context_length");
      s.attention_factor = s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
    }
    c.rope_scaling = s;
  }
  if (auto factors = k.divisors("rope_freqs.weight")) c.rope_freq_factors = std::move(*factors);
}

}  // namespace

model_config gguf_model_config(const gguf_file& g) {
  const family& fam = family_of(g);
  const gguf_keys k(g, fam.gguf_architecture);
  model_config c;
  c.architecture = fam.hf_architectures.front();
  c.family = fam.name;
  c.hidden_size = k.need_int("embedding_length");
  c.intermediate_size = k.need_int("feed_forward_length");
  c.num_hidden_layers = k.need_int("block_count");
  c.num_attention_heads = k.need_int("attention.head_count");
  c.num_key_value_heads = k.int_or("attention.head_count_kv", c.num_attention_heads);
  c.head_dim = k.int_or("attention.key_length", c.hidden_size / c.num_attention_heads);
  if (k.int_or("attention.value_length", c.head_dim) != c.head_dim)
    throw input_error(g.path() + ": metadata '" + k.key("attention.value_length") + "' differs from the key length " +
                      std::to_string(c.head_dim) + "; values and keys of one size are built");
  // Partial rotary (Phi-4-mini); checked with the rest. Where the converter interleaved the query
  // and key rows for RoPE (llama), it permuted whole heads: a part rotated is not built.
  if (const int rotated = k.int_or("rope.dimension_count", c.head_dim); rotated != c.head_dim) {
    if (fam.gguf_interleaves_rope)
      throw input_error(g.path() + ": metadata '" + k.key("rope.dimension_count") + "' is not the head size " + std::to_string(c.head_dim) +
                        "; partial rotary embeddings are not supported for " + fam.gguf_architecture);
    c.rotary_dim = rotated;
  }
  c.max_position_embeddings = k.int_or("context_length", 4096);
  c.rms_norm_eps = k.real_or("attention.layer_norm_rms_epsilon", 1e-5);
  read_rope(k, c);
  const auto& t = g.tensors();
  auto embd = t.find("token_embd.weight");
  if (embd == t.end()) throw input_error(g.path() + ": tensor 'token_embd.weight' is missing");
  c.vocab_size = int(embd->second.shape[0]);
  if (auto tokens = g.metadata().find("tokenizer.ggml.tokens");
      tokens != g.metadata().end() && tokens->is_array() && int(tokens->size()) != c.vocab_size)
    throw input_error(g.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens->size()) + " tokens but token_embd.weight has " +
                      std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = t.find("output.weight") == t.end();
  const gguf_keys tok(g, "tokenizer.ggml");
  if (tok.has("bos_token_id")) c.bos_token_id = tok.need_int("bos_token_id", 0);
  if (tok.has("eos_token_id")) c.eos_token_ids = {tok.need_int("eos_token_id", 0)};
  if (fam.read_gguf) fam.read_gguf(k, c);
  if (k.has("expert_count") && k.need_int("expert_count") > 1 && !c.moe)
    throw input_error(g.path() + ": metadata '" + k.key("expert_count") + "': this family's mixture-of-experts GGUF files are not supported");
  check_model_config(g.path(), c);
  return c;
}

std::optional<moe_config> gguf_moe(const gguf_keys& k, int expert_ff, moe_layout layout, bool normalize_top_k) {
  if (!k.has("expert_count") || k.need_int("expert_count") <= 1) return std::nullopt;
  moe_config m;
  m.layout = layout;
  m.num_experts = k.need_int("expert_count");
  m.experts_per_token = k.need_int("expert_used_count");
  m.expert_intermediate_size = expert_ff;
  m.normalize_top_k = normalize_top_k;
  return m;
}

namespace {

// The Hugging Face name of GGUF tensor `name` in family `fam`; empty for one the config consumed
// (rope_freqs, rope_factors_long/short); throws for one the family does not name.
std::string hf_name_of(const gguf_file& g, const family& fam, const std::string& name, std::smatch& m) {
  static const std::regex layer(R"(blk\.(\d+)\.(\w+)\.(weight|bias))");
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name == "rope_freqs.weight" || name == "rope_factors_long.weight" || name == "rope_factors_short.weight") return "";
  if (std::regex_match(name, m, layer))
    for (auto& [gguf_part, hf_part] : fam.layer_tensors)
      if (m[2].str() == gguf_part) return "model.layers." + m[1].str() + "." + hf_part + "." + m[3].str();
  throw input_error(g.path() + ": tensor '" + name + "' is not part of a " + fam.gguf_architecture + " model this loader knows");
}

void set_format(const gguf_tensor& t, tensor_info& i) {
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
}

// llama.cpp's converter stores each head's query and key rows (and biases) as (rotary pair,
// half) where Hugging Face has (half, pair): row h*d + 2j + s there is row h*d + s*d/2 + j here.
void uninterleave(const gguf_tensor& t, int heads, int d, tensor_info& i, std::vector<std::vector<std::uint8_t>>& storage) {
  if (i.shape.empty() || i.shape[0] != std::int64_t(heads) * d)
    throw input_error(i.file + ": has " + std::to_string(i.shape.empty() ? 0 : i.shape[0]) + " rows, expected " + std::to_string(heads * d));
  const std::size_t row = i.bytes / std::size_t(i.shape[0]);
  auto& buf = storage.emplace_back(i.bytes);
  for (int h = 0; h < heads; ++h)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < d / 2; ++j)
        std::memcpy(buf.data() + std::size_t(h * d + s * d / 2 + j) * row, t.data + std::size_t(h * d + 2 * j + s) * row, row);
  i.data = buf.data();
}

// A stacked experts' tensor ([experts][rows][row], ffn_gate_exps and the like) as one view per
// expert, under the family's name with the expert's index for its '*'.
void split_experts(const tensor_info& stacked, std::vector<tensor_info>& out) {
  if (stacked.shape.size() != 3 || stacked.shape[0] <= 0)
    throw input_error(stacked.file + ": a stacked experts' tensor must have three dimensions");
  const std::size_t n = std::size_t(stacked.shape[0]), each = stacked.bytes / n;
  const auto star = stacked.name.find('*');
  for (std::size_t e = 0; e < n; ++e) {
    tensor_info v = stacked;
    v.name = stacked.name.substr(0, star) + std::to_string(e) + stacked.name.substr(star + 1);
    v.data = stacked.data + e * each;
    v.bytes = each;
    v.shape = {stacked.shape[1], stacked.shape[2]};
    out.push_back(std::move(v));
  }
}

}  // namespace

std::vector<tensor_info> gguf_model_tensors(const gguf_file& g, const model_config& c,
                                            std::vector<std::vector<std::uint8_t>>& storage) {
  const family& fam = family_of(g);
  std::vector<tensor_info> out;
  for (const auto& [name, t] : g.tensors()) {
    std::smatch m;
    tensor_info i;
    i.name = hf_name_of(g, fam, name, m);
    if (i.name.empty()) continue;
    i.file = g.path() + " (GGUF tensor '" + name + "')";
    i.data = t.data;
    i.bytes = t.bytes;
    i.shape = t.shape;
    set_format(t, i);
    if (i.name.find('*') != std::string::npos) {
      split_experts(i, out);
      continue;
    }
    // Qwen2-MoE's shared expert gate is [1][hidden] in Hugging Face's folders, one row in GGUF.
    if (i.shape.size() == 1 && i.name.size() > 25 && i.name.compare(i.name.size() - 25, 25, "shared_expert_gate.weight") == 0)
      i.shape = {1, i.shape[0]};
    const bool q = m.size() > 2 && m[2].str() == "attn_q", k = m.size() > 2 && m[2].str() == "attn_k";
    if (fam.gguf_interleaves_rope && (q || k)) uninterleave(t, q ? c.num_attention_heads : c.num_key_value_heads, c.head_dim, i, storage);
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace troupe::model
