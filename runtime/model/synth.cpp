#include "runtime/model/synth.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/model/safetensors.h"
#include "runtime/tokenizer/synth_vocab.h"
#include "runtime/model/config_json.h"
#include "runtime/model/family.h"

namespace troupe::model {

using kernels::dtype;

namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// How a tensor's values are drawn: uniform on [center - half_width, center + half_width].
struct init { double center, half_width; };

struct tensor_plan {
  std::string name;
  std::vector<std::int64_t> shape;
  init dist;
};

// Uniform with standard deviation `std`.
init uniform_std(double std) { return {0.0, std * std::sqrt(3.0)}; }

std::vector<tensor_plan> plan_tensors(const model_config& c) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t Q = c.q_dim(), KV = c.kv_dim();
  // Logits get a standard deviation near 4 (the normalised hidden state has RMS ~1), so
  // greedy choices have clear winners rather than near-ties.
  const init vocab_init = uniform_std(4.0 / std::sqrt(double(H)));
  const init norm_init{1.0 - c.norm_offset, 0.1};  // the forward scales by offset + weight
  std::vector<tensor_plan> t;
  t.push_back({"model.embed_tokens.weight", {V, H}, vocab_init});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    if (c.layer_norms != model_config::norms::post) t.push_back({p + "input_layernorm.weight", {H}, norm_init});
    if (c.fused_projections) {
      t.push_back({p + "self_attn.qkv_proj.weight", {Q + 2 * KV, H}, uniform_std(1.0 / std::sqrt(double(H)))});
    } else {
      t.push_back({p + "self_attn.q_proj.weight", {Q, H}, uniform_std(1.0 / std::sqrt(double(H)))});
      t.push_back({p + "self_attn.k_proj.weight", {KV, H}, uniform_std(1.0 / std::sqrt(double(H)))});
      t.push_back({p + "self_attn.v_proj.weight", {KV, H}, uniform_std(1.0 / std::sqrt(double(H)))});
    }
    if (c.attention_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {Q}, uniform_std(0.2)});
      t.push_back({p + "self_attn.k_proj.bias", {KV}, uniform_std(0.2)});
      t.push_back({p + "self_attn.v_proj.bias", {KV}, uniform_std(0.2)});
    }
    t.push_back({p + "self_attn.o_proj.weight", {H, Q}, uniform_std(1.0 / std::sqrt(double(Q)))});
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {c.qk_norm_whole ? Q : c.head_dim}, norm_init});
      t.push_back({p + "self_attn.k_norm.weight", {c.qk_norm_whole ? KV : c.head_dim}, norm_init});
    }
    t.push_back({p + "post_attention_layernorm.weight", {H}, norm_init});
    if (c.layer_norms != model_config::norms::pre)  // post_attention_layernorm is on the attention's output
      t.push_back({p + "post_feedforward_layernorm.weight", {H}, norm_init});
    if (c.layer_norms == model_config::norms::sandwich) t.push_back({p + "pre_feedforward_layernorm.weight", {H}, norm_init});
    // A SwiGLU MLP of `n` features under `prefix` with HF's names (Mixtral's w1/w3/w2 or gate/up/down).
    auto mlp = [&](const std::string& prefix, std::int64_t n, bool mixtral_names) {
      t.push_back({prefix + (mixtral_names ? "w1" : "gate_proj") + ".weight", {n, H}, uniform_std(1.0 / std::sqrt(double(H)))});
      t.push_back({prefix + (mixtral_names ? "w3" : "up_proj") + ".weight", {n, H}, uniform_std(1.0 / std::sqrt(double(H)))});
      t.push_back({prefix + (mixtral_names ? "w2" : "down_proj") + ".weight", {H, n}, uniform_std(1.0 / std::sqrt(double(n)))});
    };
    if (!c.is_moe_layer(l) && c.fused_projections) {
      t.push_back({p + "mlp.gate_up_proj.weight", {2 * I, H}, uniform_std(1.0 / std::sqrt(double(H)))});
      t.push_back({p + "mlp.down_proj.weight", {H, I}, uniform_std(1.0 / std::sqrt(double(I)))});
      continue;
    }
    if (!c.is_moe_layer(l)) {
      mlp(p + "mlp.", I, false);
      continue;
    }
    const auto& m = *c.moe;
    const bool mixtral = m.layout == moe_layout::mixtral;
    const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
    // A wide router init, so that top-k choices are clear rather than near-ties.
    t.push_back({block + "gate.weight", {m.num_experts, H}, uniform_std(2.0 / std::sqrt(double(H)))});
    for (int e = 0; e < m.num_experts; ++e) mlp(block + "experts." + std::to_string(e) + ".", m.expert_intermediate_size, mixtral);
    if (m.shared_expert_intermediate_size > 0) {
      mlp(block + "shared_expert.", m.shared_expert_intermediate_size, false);
      t.push_back({block + "shared_expert_gate.weight", {1, H}, uniform_std(1.0 / std::sqrt(double(H)))});
    }
  }
  t.push_back({"model.norm.weight", {H}, norm_init});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {V, H}, vocab_init});
  return t;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw input_error(path + ": cannot write");
}

}  // namespace

model_config synth_config(const synth_options& o) {
  model_config c;
  const family* fam = family_named(o.arch);
  if (!fam) {
    std::string known;
    for (const family* f : families()) known += (known.empty() ? "" : ", ") + f->name;
    throw input_error("unknown --arch '" + o.arch + "' (" + known + ")");
  }
  c.architecture = fam->hf_architectures.front();
  c.family = fam->name;
  if (o.preset == "tiny") {
    c.vocab_size = 512, c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.intermediate_size = 160;
  } else if (o.preset == "small") {
    c.vocab_size = 32000, c.hidden_size = 512, c.num_hidden_layers = 8, c.num_attention_heads = 8;
    c.num_key_value_heads = 4, c.intermediate_size = 1408;
  } else if (o.preset == "1b") {
    c.vocab_size = 32000, c.hidden_size = 2048, c.num_hidden_layers = 22, c.num_attention_heads = 32;
    c.num_key_value_heads = 4, c.intermediate_size = 5632;
  } else if (o.preset == "moe") {  // sized for mixture-of-experts tests: 8 experts, 2 per token
    c.vocab_size = 2048, c.hidden_size = 256, c.num_hidden_layers = 4, c.num_attention_heads = 8;
    c.num_key_value_heads = 4, c.intermediate_size = 512;
  } else {
    throw input_error("unknown --preset '" + o.preset + "' (tiny, small, 1b, moe)");
  }
  if (o.vocab_size > 0) c.vocab_size = o.vocab_size;
  c.head_dim = o.head_dim > 0 ? o.head_dim : c.hidden_size / c.num_attention_heads;
  if (o.layers > 0) c.num_hidden_layers = o.layers;
  if (o.partial_rotary > 0) c.rotary_dim = int(o.partial_rotary * c.head_dim);
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = o.llama3_rope_scaling ? 500000.0 : 10000.0;
  if (o.llama3_rope_scaling) c.rope_scaling = rope_scaling_config{"llama3", 8.0, 1.0, 4.0, 1024};
  if (o.rope_scaling == "linear") c.rope_scaling = rope_scaling_config{"linear", 2.0};
  if (o.rope_scaling == "dynamic") c.rope_scaling = rope_scaling_config{"dynamic", 2.0};
  if (o.rope_scaling == "yarn") {
    rope_scaling_config s{"yarn", 4.0};
    s.original_max_position_embeddings = 256;
    s.attention_factor = 0.1 * std::log(4.0) + 1.0;
    c.rope_scaling = s;
  }
  if (!o.rope_scaling.empty() && o.rope_scaling != "linear" && o.rope_scaling != "yarn" && o.rope_scaling != "llama3" &&
      o.rope_scaling != "dynamic")
    throw input_error("unknown --rope-scaling '" + o.rope_scaling + "' (llama3, linear, yarn, dynamic)");
  c.tie_word_embeddings = o.tied_embeddings;
  if (o.arch == "mixtral" || o.arch == "qwen2_moe" || o.arch == "qwen3_moe") {
    moe_config m;
    m.layout = o.arch == "mixtral" ? moe_layout::mixtral : moe_layout::qwen;
    m.num_experts = 8;
    m.experts_per_token = 2;
    m.expert_intermediate_size = o.arch == "mixtral" ? c.intermediate_size : c.intermediate_size / 4;
    m.normalize_top_k = o.arch != "qwen2_moe";
    if (o.arch == "qwen2_moe") {
      m.shared_expert_intermediate_size = c.intermediate_size / 2;
      if (o.moe_dense_layer) m.mlp_only_layers = {0};  // one dense layer among the sparse ones, as the family allows
    }
    c.moe = m;
  }
  if (fam->synth) fam->synth(c);
  if (o.sliding_window > 0) {
    if (c.sliding_window <= 0)
      throw input_error("--sliding-window: family '" + o.arch + "' has no sliding-window layers (gemma2, gemma3 have)");
    c.sliding_window = o.sliding_window;
    for (int& w : c.layer_windows) w = w > 0 ? o.sliding_window : 0;
  }
  const auto specials = tokenizer::synth_special_ids(c.vocab_size);
  c.bos_token_id = specials.bos;
  c.eos_token_ids = {specials.eos};
  // What the family reads of its config.json (biases, norms, experts) is what the model is.
  return parse_model_config(to_config_json(c), o.arch + " preset " + o.preset);
}

void synthesize(const synth_options& o, const progress_fn& progress) {
  const model_config c = synth_config(o);
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw input_error(o.out + ": cannot create folder: " + ec.message());
  write_text(o.out + "/config.json", to_config_json(c));
  if (o.tokenizer) {
    write_text(o.out + "/tokenizer.json", tokenizer::synth_tokenizer_json(c.vocab_size, o.seed));
    write_text(o.out + "/tokenizer_config.json", tokenizer::synth_tokenizer_config_json(c.vocab_size));
  }

  const auto plans = plan_tensors(c);
  safetensors_writer w;
  std::size_t total = 0;
  for (auto& p : plans) {
    w.declare(p.name, o.type, p.shape);
    std::size_t n = 1;
    for (auto d : p.shape) n *= std::size_t(d);
    total += n * kernels::dtype_size(o.type);
  }
  const std::string tmp = o.out + "/model.safetensors.partial";
  w.open(tmp);
  std::size_t written = 0;
  constexpr std::size_t chunk = 1 << 20;  // elements generated per write
  std::vector<std::uint8_t> buf(chunk * kernels::dtype_size(o.type));
  for (auto& p : plans) {
    std::size_t n = 1;
    for (auto d : p.shape) n *= std::size_t(d);
    const std::uint64_t stream = mix(o.seed ^ name_hash(p.name));
    for (std::size_t begin = 0; begin < n; begin += chunk) {
      const std::size_t count = std::min(chunk, n - begin);
      constexpr std::size_t slice = 1 << 14;
      kernels::parallel_for((count + slice - 1) / slice, [&](std::size_t s) {
        for (std::size_t i = s * slice; i < std::min(count, (s + 1) * slice); ++i) {
          double u = double(mix(stream + begin + i) >> 11) * 0x1.0p-53;  // [0, 1)
          float v = float(p.dist.center + (2 * u - 1) * p.dist.half_width);
          kernels::store_from_f32(buf.data(), o.type, i, v);
        }
      });
      w.write(buf.data(), count * kernels::dtype_size(o.type));
      written += count * kernels::dtype_size(o.type);
      if (progress) progress(written, total);
    }
  }
  w.close();
  std::filesystem::rename(tmp, o.out + "/model.safetensors", ec);
  if (ec) throw input_error(o.out + "/model.safetensors: cannot rename into place: " + ec.message());
}

void synthesize_lora(const model_config& c, const std::string& out, int rank, std::uint32_t seed) {
  namespace fs = std::filesystem;
  if (rank < 1 || rank > 1024) throw input_error("a LoRA rank is 1 to 1024, not " + std::to_string(rank));
  static const char* const modules[][2] = {{"self_attn", "q_proj"}, {"self_attn", "k_proj"}, {"self_attn", "v_proj"},
                                           {"self_attn", "o_proj"}, {"mlp", "gate_proj"},    {"mlp", "up_proj"},
                                           {"mlp", "down_proj"}};
  std::error_code ec;
  fs::create_directories(out, ec);
  {
    std::ofstream config(fs::path(out) / "adapter_config.json");
    config << nlohmann::json{{"peft_type", "LORA"}, {"r", rank}, {"lora_alpha", 2 * rank}, {"bias", "none"}}.dump();
    if (!config) throw input_error(out + ": cannot write adapter_config.json");
  }
  safetensors_writer w;
  std::vector<std::vector<float>> data;
  auto values = [](std::size_t n, std::uint32_t s) {
    std::mt19937 g(s);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(g);
    return v;
  };
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const auto& m : modules) {
      const std::string name = "base_model.model.model.layers." + std::to_string(l) + "." + m[0] + "." + m[1];
      const std::string t = m[1];
      const int in = t == "o_proj" ? c.q_dim() : t == "down_proj" ? c.intermediate_size : c.hidden_size;
      const int rows = t == "q_proj"                        ? c.q_dim()
                       : (t == "k_proj" || t == "v_proj")     ? c.kv_dim()
                       : (t == "gate_proj" || t == "up_proj") ? c.intermediate_size
                                                              : c.hidden_size;
      w.declare(name + ".lora_A.weight", kernels::dtype::f32, {rank, in});
      w.declare(name + ".lora_B.weight", kernels::dtype::f32, {rows, rank});
      data.push_back(values(std::size_t(rank) * std::size_t(in), seed++));
      data.push_back(values(std::size_t(rows) * std::size_t(rank), seed++));
    }
  w.open((fs::path(out) / "adapter_model.safetensors").string());
  for (const auto& d : data) w.write(d.data(), d.size() * sizeof(float));
  w.close();
}

}  // namespace troupe::model
