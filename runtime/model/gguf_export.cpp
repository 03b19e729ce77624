#include "runtime/model/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/model/family.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/model_config.h"
#include "runtime/model/rope_scaling.h"
#include "runtime/model/safetensors.h"
#include "runtime/tokenizer/gguf_vocab.h"
#include "runtime/model/model_source.h"

namespace troupe::model {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t alignment = 32;  // GGUF's default, so general.alignment is not written

// GGUF metadata, encoded as it is added.
class metadata {
 public:
  std::uint64_t count = 0;
  std::string bytes;

  void u32(const std::string& key, std::uint32_t v) { kv(key, 4), pod(v); }
  void f32(const std::string& key, float v) { kv(key, 6), pod(v); }
  void boolean(const std::string& key, bool v) { kv(key, 7), pod(std::uint8_t(v)); }
  void str(const std::string& key, const std::string& v) { kv(key, 8), text(v); }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9), pod(std::uint32_t(8)), pod(std::uint64_t(v.size()));
    for (auto& s : v) text(s);
  }
  void i32s(const std::string& key, const std::vector<std::int32_t>& v) {
    kv(key, 9), pod(std::uint32_t(5)), pod(std::uint64_t(v.size()));
    for (auto x : v) pod(x);
  }
  void f32s(const std::string& key, const std::vector<float>& v) {
    kv(key, 9), pod(std::uint32_t(6)), pod(std::uint64_t(v.size()));
    for (auto x : v) pod(x);
  }

  template <class T>
  void pod(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    pod(std::uint64_t(s.size()));
    bytes += s;
  }

 private:
  void kv(const std::string& key, std::uint32_t type) {
    ++count;
    text(key);
    pod(type);
  }
};

// HF tensor name -> GGUF name, the head count its rows are interleaved by (0: none), and for an
// expert's projection, which expert it is (its rows go into the layer's stacked tensor).
struct gguf_place {
  std::string name;
  int interleave_heads = 0;
  int expert = -1;
};

// By the family's table (family.h): model.layers.N.<hf>.{weight,bias} is blk.N.<gguf>.{weight,bias};
// a '*' in the table's Hugging Face name stands for the expert's index.
std::optional<gguf_place> place_of(const std::string& hf, const model_config& c, const family& fam) {
  if (hf == "model.embed_tokens.weight") return gguf_place{"token_embd.weight"};
  if (hf == "model.norm.weight") return gguf_place{"output_norm.weight"};
  if (hf == "lm_head.weight") return gguf_place{"output.weight"};
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(hf, m, layer)) return std::nullopt;
  const std::string part = m[2].str(), gguf_prefix = "blk." + m[1].str() + ".";
  for (auto& [gguf_part, hf_part] : fam.layer_tensors) {
    if (const auto star = hf_part.find('*'); star != std::string::npos) {
      const std::string before = hf_part.substr(0, star), after = hf_part.substr(star + 1);
      if (part.size() <= before.size() + after.size() || part.compare(0, before.size(), before) != 0 ||
          part.compare(part.size() - after.size(), after.size(), after) != 0)
        continue;
      const std::string index = part.substr(before.size(), part.size() - before.size() - after.size());
      if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) continue;
      return gguf_place{gguf_prefix + gguf_part + "." + m[3].str(), 0, std::stoi(index)};
    }
    if (part != hf_part) continue;
    const bool q = gguf_part == "attn_q", k = gguf_part == "attn_k";
    const int heads = !fam.gguf_interleaves_rope ? 0 : q ? c.num_attention_heads : k ? c.num_key_value_heads : 0;
    return gguf_place{gguf_prefix + gguf_part + "." + m[3].str(), heads};
  }
  return std::nullopt;
}

// The order llama.cpp writes: the embedding table, each block's tensors, the final norm, the head.
int order_of(const std::string& gguf_name) {
  if (gguf_name == "token_embd.weight") return -1;
  if (gguf_name.rfind("blk.", 0) == 0) return std::stoi(gguf_name.substr(4));
  return gguf_name == "output_norm.weight" ? 1 << 20 : (1 << 20) + 1;
}

struct planned {
  const tensor_info* t;       // the folder's tensor, or null for one made here (rope_freqs)
  std::vector<const tensor_info*> experts;  // or the experts' tensors stacked into this one, in order
  std::vector<float> values;  // ... whose values are these
  float shift = 0.0f;         // added to every value: a norm's offset (Gemma's folders store weight - 1)
  gguf_place place;
  std::uint32_t type;
  std::vector<std::int64_t> shape;
  std::size_t rows, len, bytes;
};

// One tensor's data in its GGUF type: rows (a bias's elements) interleaved per head where
// asked, then quantized.
std::string tensor_data(const planned& p, const model_config& c) {
  std::vector<float> x = p.values;
  if (p.t) {
    const kernels::dtype dt = p.t->type();
    x.resize(p.rows * p.len);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = kernels::load_as_f32(p.t->data, dt, i) + p.shift;
  }
  for (const tensor_info* e : p.experts) {
    const kernels::dtype dt = e->type();
    for (std::size_t i = 0; i < std::size_t(e->numel()); ++i) x.push_back(kernels::load_as_f32(e->data, dt, i));
  }
  if (p.place.interleave_heads > 0) {  // row h*d + 2j + s of the file is row h*d + s*d/2 + j here
    const std::size_t row = p.shape.size() == 1 ? 1 : p.len;
    std::vector<float> y(x.size());
    const int heads = p.place.interleave_heads, d = c.head_dim;
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < 2; ++s)
        for (int j = 0; j < d / 2; ++j)
          std::memcpy(&y[std::size_t(h * d + 2 * j + s) * row], &x[std::size_t(h * d + s * d / 2 + j) * row], row * 4);
    x.swap(y);
  }
  std::string out(p.bytes, '\0');
  auto* o = reinterpret_cast<std::uint8_t*>(out.data());
  const std::size_t rb = ggml_row_bytes(p.type, p.len);
  kernels::parallel_for(p.rows, [&](std::size_t r) { quantize_ggml_row(p.type, x.data() + r * p.len, p.len, o + r * rb); });
  return out;
}

const family& check_exportable(const model_config& c, const std::string& in) {
  const family* fam = family_named(c.family);
  auto refuse = [&](const std::string& why) {
    throw input_error(in + ": " + why + "; GGUF export writes dense " + known_gguf_architectures() + " models");
  };
  if (!fam || fam->gguf_architecture.empty()) refuse("architecture " + c.architecture);
  if (c.weight_quant) refuse(std::string("already quantized (") + kernels::quant_name(*c.weight_quant) + "); export the original weights");
  if (!c.weight_mix.empty()) refuse("already quantized (" + c.weight_mix + "); export the original weights");
  if (c.moe && (!c.moe->mlp_only_layers.empty() || c.moe->sparse_step != 1))
    refuse("dense layers among the experts' (mlp_only_layers, decoder_sparse_step): llama.cpp's files have experts in every layer");
  if (c.rope_scaling && c.rope_scaling->type == "longrope" && fam->name != "phi3") refuse("RoPE scaling longrope outside Phi-3");
  if (c.rope_scaling && c.rope_scaling->type == "yarn" &&
      (c.rope_scaling->beta_fast != 32.0 || c.rope_scaling->beta_slow != 1.0 ||
       std::abs(c.rope_scaling->attention_factor - (0.1 * std::log(c.rope_scaling->factor) + 1.0)) > 1e-9))
    refuse("a YaRN scaling with its own ramp or attention factor (llama.cpp's files hold only the factor and the original context)");
  if (fam->gguf_interleaves_rope && c.rotated_dims() != c.head_dim)
    refuse("partial rotary embeddings in " + fam->gguf_architecture + " (its files interleave whole heads for RoPE)");
  if (fam->gguf_architecture == "llama" && c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings)
    refuse("a sliding window of " + std::to_string(c.sliding_window) + " on every layer (llama.cpp's " + fam->gguf_architecture +
           " architecture has none, so the file would compute another model)");
  return *fam;
}

// RoPE scaling as llama.cpp's converter writes it: linear as rope.scaling.*; llama3's as a
// divisor per frequency in rope_freqs.weight (written with the tensors).
std::vector<float> rope_freq_factors(const model_config& c) {
  if (!c.rope_scaling || c.rope_scaling->type != "llama3") return {};
  model_config plain = c;
  plain.rope_scaling.reset();
  plain.rope_freq_factors.clear();
  const auto base = plain.rope_inv_freq(), scaled = c.rope_inv_freq();
  std::vector<float> out(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) out[i] = float(base[i] / scaled[i]);
  return out;
}

void add_tokenizer(const std::string& in, const model_config& c, metadata& m) {
  const std::string path = in + "/tokenizer.json";
  std::ifstream f(path);
  if (!f) throw input_error(path + ": cannot read; a GGUF file carries its tokenizer");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(path + ": not JSON: " + e.what());
  }
  const auto t = tokenizer::gguf_tokenizer_from_json(j, path);
  if (t.tokens.size() != std::size_t(c.vocab_size))
    throw input_error(path + ": " + std::to_string(t.tokens.size()) + " tokens but the model has " + std::to_string(c.vocab_size) +
                      " embedding rows; GGUF needs one token per row");
  m.str("tokenizer.ggml.model", t.model);
  m.str("tokenizer.ggml.pre", t.pre);
  m.strings("tokenizer.ggml.tokens", t.tokens);
  m.i32s("tokenizer.ggml.token_type", t.token_type);
  if (t.model == "llama") {
    m.f32s("tokenizer.ggml.scores", t.scores);
    m.boolean("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
    if (t.unknown_token_id >= 0) m.u32("tokenizer.ggml.unknown_token_id", std::uint32_t(t.unknown_token_id));
  } else {
    m.strings("tokenizer.ggml.merges", t.merges);
  }
  if (c.bos_token_id) m.u32("tokenizer.ggml.bos_token_id", std::uint32_t(*c.bos_token_id));
  if (!c.eos_token_ids.empty()) m.u32("tokenizer.ggml.eos_token_id", std::uint32_t(c.eos_token_ids[0]));
  m.boolean("tokenizer.ggml.add_bos_token", t.add_bos_token);
  std::ifstream tc(in + "/tokenizer_config.json");
  if (!tc) return;
  const auto cfg = nlohmann::json::parse(tc, nullptr, false);
  if (cfg.is_object() && cfg.contains("chat_template") && cfg["chat_template"].is_string())
    m.str("tokenizer.chat_template", cfg["chat_template"].get<std::string>());
}

}  // namespace

std::uint32_t gguf_file_type(const std::string& mix) {
  static const std::pair<const char*, std::uint32_t> types[] = {{"f32", 0},     {"f16", 1},     {"q4_0", 2},   {"q8_0", 7},
                                                                {"q2_k", 10},   {"q3_k_m", 12}, {"q4_k_m", 15}, {"q5_k_m", 17},
                                                                {"q6_k", 18},   {"iq4_xs", 30}};
  for (auto& [name, t] : types)
    if (mix == name) return t;
  gguf_mix_type(mix, "output.weight", 1, 256);  // throws naming the known mixes
  return 0;
}

namespace {

// Every tensor of the folder in its place and type, in the order llama.cpp writes them.
std::vector<planned> plan_export(const gguf_export_options& o, const model_config& c, const family& fam,
                                 const std::vector<std::unique_ptr<safetensors_file>>& files, quantize_report& rep) {
  std::vector<planned> plan;
  std::map<std::string, std::map<int, const tensor_info*>> stacks;  // GGUF name -> expert -> its tensor
  auto add = [&](const tensor_info* t, std::vector<const tensor_info*> experts, const gguf_place& place, std::vector<std::int64_t> shape) {
    const bool matrix = shape.size() >= 2;
    std::size_t values = t ? std::size_t(t->numel()) : 0;
    for (const tensor_info* e : experts) values += std::size_t(e->numel());
    const std::size_t len = std::size_t(shape.back()), rows = matrix ? values / len : 1;
    const std::uint32_t type = !matrix ? 0 : o.mix == "f32" ? 0 : o.mix == "f16" ? 1
                                                          : gguf_mix_type(o.mix, place.name, c.num_hidden_layers, std::int64_t(len));
    if (type > 1 && len % 32 != 0)
      throw input_error(place.name + ": rows of " + std::to_string(len) + " weights; GGUF blocks need a multiple of 32");
    const bool norm = place.name.size() > 11 && place.name.compare(place.name.size() - 11, 11, "norm.weight") == 0;
    plan.push_back({t, std::move(experts), {}, norm ? c.norm_offset : 0.0f, place, type, std::move(shape), rows, len, rows * ggml_row_bytes(type, len)});
  };
  for (auto& f : files)
    for (auto& [name, t] : f->tensors()) {
      auto place = place_of(name, c, fam);
      if (!place) throw input_error(t.file + ": tensor '" + name + "' has no place in a GGUF " + fam.gguf_architecture + " file");
      if (c.tie_word_embeddings && place->name == "output.weight") continue;  // llama.cpp writes no head for a tied model
      t.type();  // a float dtype, else an error naming the tensor
      rep.bytes_in += t.bytes;
      if (place->expert >= 0) {
        stacks[place->name][place->expert] = &t;
        continue;
      }
      // Qwen2-MoE's shared expert gate: [1][hidden] in the folder, one row (F32) in llama.cpp's files.
      const bool row = t.shape.size() == 2 && t.shape[0] == 1 && place->name.find("ffn_gate_inp_shexp") != std::string::npos;
      add(&t, {}, *place, row ? std::vector<std::int64_t>{t.shape[1]} : t.shape);
    }
  for (auto& [name, by_expert] : stacks) {
    std::vector<const tensor_info*> experts;
    for (auto& [e, t] : by_expert) {
      if (e != int(experts.size()) || t->shape != by_expert.begin()->second->shape)
        throw input_error(t->file + ": the experts of " + name + " are not 0.." + std::to_string(by_expert.size() - 1) + " of one shape");
      experts.push_back(t);
    }
    add(nullptr, experts, gguf_place{name}, {std::int64_t(experts.size()), experts[0]->shape[0], experts[0]->shape[1]});
  }
  // RoPE divisors as the converter writes them: Llama 3's in rope_freqs, longrope's in
  // rope_factors_long and rope_factors_short.
  auto divisors = [&](const std::string& name, const std::vector<double>& v) {
    const std::size_t n = v.size();
    plan.push_back({nullptr, {}, std::vector<float>(v.begin(), v.end()), 0.0f, {name}, 0, {std::int64_t(n)}, 1, n, n * 4});
  };
  if (auto factors = rope_freq_factors(c); !factors.empty()) divisors("rope_freqs.weight", {factors.begin(), factors.end()});
  if (c.rope_scaling && c.rope_scaling->type == "longrope") {
    divisors("rope_factors_long.weight", c.rope_scaling->long_factor);
    divisors("rope_factors_short.weight", c.rope_scaling->short_factor);
  }
  for (auto& p : plan) {
    rep.bytes_out += p.bytes;
    (p.type == 0 ? rep.tensors_copied : rep.tensors_quantized) += 1;
  }
  std::stable_sort(plan.begin(), plan.end(), [](const planned& a, const planned& b) { return order_of(a.place.name) < order_of(b.place.name); });
  return plan;
}

// The hyperparameters under the family's prefix, as llama.cpp's converter writes them.
void add_hparams(const model_config& c, const family& fam, metadata& m) {
  const std::string a = fam.gguf_architecture + ".";
  m.u32(a + "context_length", std::uint32_t(c.max_position_embeddings));
  m.u32(a + "embedding_length", std::uint32_t(c.hidden_size));
  m.u32(a + "block_count", std::uint32_t(c.num_hidden_layers));
  m.u32(a + "feed_forward_length", std::uint32_t(c.intermediate_size));
  m.u32(a + "attention.head_count", std::uint32_t(c.num_attention_heads));
  m.u32(a + "attention.head_count_kv", std::uint32_t(c.num_key_value_heads));
  m.u32(a + "attention.key_length", std::uint32_t(c.head_dim));
  m.u32(a + "attention.value_length", std::uint32_t(c.head_dim));
  m.u32(a + "rope.dimension_count", std::uint32_t(c.rotated_dims()));
  m.f32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  m.f32(a + "rope.freq_base", float(rope_base(c)));  // dynamic NTK: llama.cpp has no such type, only its base
  if (c.rope_scaling && (c.rope_scaling->type == "linear" || c.rope_scaling->type == "yarn")) {
    m.str(a + "rope.scaling.type", c.rope_scaling->type);
    m.f32(a + "rope.scaling.factor", float(c.rope_scaling->factor));
    if (c.rope_scaling->type == "yarn")
      m.u32(a + "rope.scaling.original_context_length", std::uint32_t(c.rope_scaling->original_max_position_embeddings));
  }
  m.u32(a + "vocab_size", std::uint32_t(c.vocab_size));
  if (!fam.write_gguf) return;
  const nlohmann::json own = fam.write_gguf(c);
  for (auto& [key, value] : own.items()) {
    if (value.is_number_integer()) m.u32(a + key, value.get<std::uint32_t>());
    else m.f32(a + key, value.get<float>());
  }
}

}  // namespace

quantize_report export_gguf(const gguf_export_options& o, const std::function<void(std::size_t, std::size_t)>& progress) {
  const std::uint32_t file_type = gguf_file_type(o.mix);
  if (is_gguf_path(o.in)) throw input_error(o.in + ": is a GGUF file; GGUF export reads a Hugging Face model folder");
  const model_config c = load_model_config(o.in);
  const family& fam = check_exportable(c, o.in);
  std::vector<std::unique_ptr<safetensors_file>> files;
  for (auto& p : model_safetensors_files(o.in)) files.push_back(std::make_unique<safetensors_file>(p));
  if (files.empty()) throw input_error(o.in + ": no *.safetensors files");
  quantize_report rep;
  const std::vector<planned> plan = plan_export(o, c, fam, files, rep);

  metadata m;
  m.str("general.architecture", fam.gguf_architecture);
  m.str("general.name", fs::path(o.in).filename().string());
  m.u32("general.file_type", file_type);
  m.u32("general.quantization_version", 2);
  add_hparams(c, fam, m);
  add_tokenizer(o.in, c, m);

  metadata head;  // magic, counts, metadata, tensor table
  head.bytes = "GGUF";
  head.pod(std::uint32_t(3));
  head.pod(std::uint64_t(plan.size()));
  head.pod(m.count);
  head.bytes += m.bytes;
  std::uint64_t offset = 0;
  for (auto& p : plan) {
    head.text(p.place.name);
    head.pod(std::uint32_t(p.shape.size()));
    for (auto d = p.shape.rbegin(); d != p.shape.rend(); ++d) head.pod(std::uint64_t(*d));  // innermost first
    head.pod(p.type);
    head.pod(offset);
    offset = (offset + p.bytes + alignment - 1) / alignment * alignment;
  }
  head.bytes.resize((head.bytes.size() + alignment - 1) / alignment * alignment, '\0');

  const std::string tmp = o.out + ".partial";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw input_error(o.out + ": cannot write");
  out.write(head.bytes.data(), std::streamsize(head.bytes.size()));
  for (std::size_t i = 0; i < plan.size(); ++i) {
    std::string data = tensor_data(plan[i], c);
    data.resize((data.size() + alignment - 1) / alignment * alignment, '\0');
    out.write(data.data(), std::streamsize(data.size()));
    if (progress) progress(i + 1, plan.size());
  }
  out.close();
  if (!out) throw input_error(o.out + ": writing failed (disk full?)");
  fs::rename(tmp, o.out);
  return rep;
}

}  // namespace troupe::model
