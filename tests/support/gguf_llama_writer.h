// Writes llama GGUF files from safetensors model folders the way llama.cpp's converter does
// (tensor names, dimensions innermost first, each head's query/key rows interleaved), for tests
// that compare a GGUF file with the folder it came from.
#pragma once
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "tests/support/gguf_writer.h"
#include "runtime/model/model_source.h"

namespace troupe::test {

// tokenizer.json (byte-level BPE) as GGUF's gpt2 tokenizer metadata, with the chat template.
inline void add_gpt2_tokenizer(const std::string& dir, gguf_writer& w) {
  std::ifstream in(dir + "/tokenizer.json");
  if (!in) return;
  const auto j = nlohmann::json::parse(in);
  std::size_t n = 0;  // added tokens may lie past the BPE vocabulary
  for (auto& [t, id] : j["model"]["vocab"].items()) n = std::max(n, id.get<std::size_t>() + 1);
  for (auto& a : j["added_tokens"]) n = std::max(n, a["id"].get<std::size_t>() + 1);
  std::vector<std::string> tokens(n);
  for (auto& [t, id] : j["model"]["vocab"].items()) tokens.at(id.get<std::size_t>()) = t;
  std::vector<std::int32_t> types(tokens.size(), 1);
  for (auto& a : j["added_tokens"]) {
    tokens.at(a["id"].get<std::size_t>()) = a["content"].get<std::string>();
    types.at(a["id"].get<std::size_t>()) = a["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (auto& m : j["model"]["merges"]) merges.push_back(m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>() : m.get<std::string>());
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", "gpt-2");  // llama.cpp's name for GPT-2's pre-tokenizer (it refuses "gpt2")
  w.strings("tokenizer.ggml.tokens", tokens);
  w.i32s("tokenizer.ggml.token_type", types);
  w.strings("tokenizer.ggml.merges", merges);
  const auto c = model::load_model_config(dir);
  if (c.bos_token_id) w.u32("tokenizer.ggml.bos_token_id", std::uint32_t(*c.bos_token_id));
  if (!c.eos_token_ids.empty()) w.u32("tokenizer.ggml.eos_token_id", std::uint32_t(c.eos_token_ids[0]));
  w.boolean("tokenizer.ggml.add_bos_token", !j["post_processor"].is_null());
  std::ifstream cfg(dir + "/tokenizer_config.json");
  if (cfg) {
    const auto tc = nlohmann::json::parse(cfg);
    if (tc.contains("chat_template")) w.str("tokenizer.chat_template", tc["chat_template"].get<std::string>());
  }
}

// Hugging Face name -> GGUF name, as convert_hf_to_gguf.py maps a llama model.
inline std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> parts[] = {
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},   {"self_attn.v_proj", "attn_v"},           {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},                {"mlp.down_proj", "ffn_down"}};
  const std::string layer = hf.substr(std::strlen("model.layers."), hf.find('.', std::strlen("model.layers.")) - std::strlen("model.layers."));
  for (auto& [h, g] : parts)
    if (hf.find(std::string(".") + h + ".weight") != std::string::npos) return "blk." + layer + "." + g + ".weight";
  BOOST_FAIL("no GGUF name for " << hf);
  return {};
}

// The converter's row order for a query/key weight: row h*d + 2j + s holds HF row h*d + s*d/2 + j.
inline std::string interleave_heads(const std::uint8_t* data, std::size_t bytes, int heads, int d) {
  const std::size_t row = bytes / std::size_t(heads * d);
  std::string out(bytes, '\0');
  for (int h = 0; h < heads; ++h)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < d / 2; ++j)
        std::memcpy(out.data() + std::size_t(h * d + 2 * j + s) * row, data + std::size_t(h * d + s * d / 2 + j) * row, row);
  return out;
}

// Writes to `path` a GGUF file holding the safetensors folder `dir` (F32/F16 as they are, U8
// rows of a troupe-quantized folder as `quant`'s ggml type) and, when the folder has them, its
// tokenizer.json as a gpt2 tokenizer and tokenizer_config.json's chat template. `edit` changes
// metadata before the tensors are added.
inline void llama_metadata(const std::string& dir, gguf_writer& w) {
  const auto c = model::load_model_config(dir);
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", std::uint32_t(c.hidden_size));
  w.u32("llama.feed_forward_length", std::uint32_t(c.intermediate_size));
  w.u32("llama.block_count", std::uint32_t(c.num_hidden_layers));
  w.u32("llama.attention.head_count", std::uint32_t(c.num_attention_heads));
  w.u32("llama.attention.head_count_kv", std::uint32_t(c.num_key_value_heads));
  w.u32("llama.context_length", std::uint32_t(c.max_position_embeddings));
  w.u32("llama.rope.dimension_count", std::uint32_t(c.head_dim));
  w.f32("llama.attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.f32("llama.rope.freq_base", float(c.rope_theta));
  add_gpt2_tokenizer(dir, w);
}

inline void write_llama_gguf(const std::string& dir, const std::string& path, std::optional<kernels::quant_type> quant,
                             const std::function<void(gguf_writer&)>& edit = {}) {
  const auto c = model::load_model_config(dir);
  gguf_writer w;
  llama_metadata(dir, w);
  if (edit) edit(w);
  model::safetensors_file f(dir + "/model.safetensors");
  for (const auto& [name, t] : f.tensors()) {
    std::uint32_t type = t.dtype_name == "F32" ? 0 : t.dtype_name == "F16" ? 1 : t.dtype_name == "BF16" ? 30 : 99;
    std::vector<std::uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (t.dtype_name == "U8") {
      BOOST_TEST_REQUIRE(quant.has_value());
      type = *quant == kernels::quant_type::q8_0 ? 8 : 2;
      ne[0] = std::uint64_t(t.shape[1]) / (*quant == kernels::quant_type::q8_0 ? 34 : 18) * 32;
    }
    BOOST_TEST_REQUIRE(type != 99u, name << " " << t.dtype_name);
    std::string data(reinterpret_cast<const char*>(t.data), t.bytes);
    if (name.find("q_proj") != std::string::npos) data = interleave_heads(t.data, t.bytes, c.num_attention_heads, c.head_dim);
    if (name.find("k_proj") != std::string::npos) data = interleave_heads(t.data, t.bytes, c.num_key_value_heads, c.head_dim);
    w.tensor(gguf_name(name), type, ne, data);
  }
  w.write(path);
}

// Writes the F32/F16 folder `dir` as a GGUF file quantized tensor by tensor under llama.cpp's
// `mix` (runtime/model/gguf_mix.h) to `path`, and the same tensors dequantized back to F32 to
// `f32_path`: the quantized file's exact float equivalent.
inline void write_mixed_llama_gguf(const std::string& dir, const std::string& path, const std::string& mix,
                                   const std::string& f32_path) {
  const auto c = model::load_model_config(dir);
  gguf_writer w, wf;
  llama_metadata(dir, w);
  llama_metadata(dir, wf);
  model::safetensors_file f(dir + "/model.safetensors");
  for (const auto& [name, t] : f.tensors()) {
    const std::string gname = gguf_name(name);
    const std::size_t rows = t.shape.size() == 2 ? std::size_t(t.shape[0]) : 1, len = std::size_t(t.shape.back());
    std::vector<float> x(rows * len), back(rows * len);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = kernels::load_as_f32(t.data, t.type(), i);
    const std::uint32_t type = t.shape.size() == 2 ? model::gguf_mix_type(mix, gname, c.num_hidden_layers, std::int64_t(len)) : 0;
    std::string data;
    if (auto kq = kernels::kquant_of_ggml(type)) {
      const std::size_t rb = len / kernels::kquant_block * kernels::kquant_block_bytes(*kq);
      data.resize(rows * rb);
      auto* out = reinterpret_cast<std::uint8_t*>(data.data());
      for (std::size_t r = 0; r < rows; ++r) {
        kernels::quantize_kquant_row(*kq, x.data() + r * len, len, out + r * rb);
        kernels::dequantize_kquant_row(*kq, out + r * rb, len, back.data() + r * len);
      }
    } else if (type == 2 || type == 8) {
      const auto q = type == 8 ? kernels::quant_type::q8_0 : kernels::quant_type::q4_0;
      const std::size_t rb = kernels::quant_row_bytes(q, len);
      data.resize(rows * rb);
      auto* out = reinterpret_cast<std::uint8_t*>(data.data());
      for (std::size_t r = 0; r < rows; ++r) {
        kernels::quantize_row(q, x.data() + r * len, len, out + r * rb, nullptr);
        kernels::dequantize_row(q, out + r * rb, len, 0.0f, back.data() + r * len);
      }
    } else {
      BOOST_TEST_REQUIRE(type == 0u, gname << ": the writer has no ggml type " << type);
      back = x;
      data.assign(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    }
    std::string fdata(reinterpret_cast<const char*>(back.data()), back.size() * 4);
    const bool q = name.find("q_proj") != std::string::npos, k = name.find("k_proj") != std::string::npos;
    if (q || k) {
      const int heads = q ? c.num_attention_heads : c.num_key_value_heads;
      data = interleave_heads(reinterpret_cast<const std::uint8_t*>(data.data()), data.size(), heads, c.head_dim);
      fdata = interleave_heads(reinterpret_cast<const std::uint8_t*>(fdata.data()), fdata.size(), heads, c.head_dim);
    }
    std::vector<std::uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    w.tensor(gname, type, ne, std::move(data));
    wf.tensor(gname, 0, ne, std::move(fdata));
  }
  w.write(path);
  wf.write(f32_path);
}

}  // namespace troupe::test
