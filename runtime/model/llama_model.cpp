#include "runtime/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/geglu.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/model/gguf.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/lora.h"
#include "runtime/model/op_profile.h"
#include "runtime/model/model_source.h"

namespace troupe::model {

using kernels::dtype;

namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Stored in a block format (its rows are bytes, read whole).
bool in_blocks(const tensor_info& t) { return t.quant || t.kquant; }

class tensor_index {
 public:
  tensor_index(const std::vector<std::unique_ptr<safetensors_file>>& files, std::string dir)
      : dir_(std::move(dir)) {
    for (auto& f : files)
      for (auto& [name, t] : f->tensors()) {
        if (!by_name_.emplace(name, &t).second)
          throw input_error(f->path() + ": tensor '" + name + "' also appears in another file");
      }
  }
  tensor_index(const std::vector<tensor_info>& tensors, std::string dir) : dir_(std::move(dir)), gguf_(true) {
    for (auto& t : tensors) by_name_.emplace(t.name, &t);
  }
  bool any_quantized() const {
    return std::any_of(by_name_.begin(), by_name_.end(), [](auto& e) { return in_blocks(*e.second); });
  }
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  // A projection's weight of logical shape {n, k}: plain, or in a quantized model its stored
  // rows (U8 blocks of q8_0/q4_0, or I8 with an F32 `<name>_scale` of n row scales).
  tensor_info get_linear(const std::string& name, std::int64_t n, std::int64_t k, std::optional<kernels::quant_type> quant) const {
    const tensor_info& t = find(name);
    if (t.kquant) return get_kquant(t, n, k);
    const auto q = t.quant ? t.quant : quant;  // a GGUF tensor, or one in a mix, says its own format
    if (!q && t.dtype_name == "U8")
      throw input_error(t.file + ": tensor '" + name + "' is U8 rows of no known format: a quantized folder names it in "
                        "config.json's quantization_config, or, in a mix, in the file's metadata (" + format_metadata_key(name) + ")");
    if (!q) return get(name, {n, k});
    const bool int8 = *q == kernels::quant_type::int8;
    const std::string want = int8 ? "I8" : "U8";
    if (t.dtype_name != want)
      throw input_error(t.file + ": tensor '" + name + "' has dtype " + t.dtype_name + "; a " + kernels::quant_name(*q) +
                        " model stores its projections as " + want);
    if (k % std::int64_t(kernels::quant_block) != 0)
      throw input_error(t.file + ": tensor '" + name + "' has " + std::to_string(k) + " input features; " + kernels::quant_name(*q) +
                        " needs a multiple of 32");
    const std::vector<std::int64_t> stored{n, std::int64_t(kernels::quant_row_bytes(*q, std::size_t(k)))};
    if (t.shape != stored)
      throw input_error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(stored) + " (" +
                        kernels::quant_name(*q) + " rows of " + std::to_string(k) + " weights)");
    if (int8) get(name + "_scale", {n});
    tensor_info out = t;
    out.quant = q;
    return out;
  }
  // A GGUF tensor in a K-quant or IQ4_XS format: whole super-blocks per row.
  tensor_info get_kquant(const tensor_info& t, std::int64_t n, std::int64_t k) const {
    const char* format = kernels::kquant_name(*t.kquant);
    if (k % std::int64_t(kernels::kquant_block) != 0)
      throw input_error(t.file + ": tensor '" + t.name + "' has " + std::to_string(k) + " input features; " + format +
                        " needs a multiple of 256");
    const std::vector<std::int64_t> stored{n, k / std::int64_t(kernels::kquant_block) * std::int64_t(kernels::kquant_block_bytes(*t.kquant))};
    if (t.shape != stored)
      throw input_error(t.file + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(stored) + " (" +
                        format + " rows of " + std::to_string(k) + " weights)");
    return t;
  }
  const tensor_info& get(const std::string& name, std::vector<std::int64_t> shape) const {
    const tensor_info& t = find(name);
    if (t.shape != shape)
      throw input_error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(shape));
    t.type();  // throws for unsupported dtypes, naming file and tensor
    return t;
  }

  const tensor_info& find(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw input_error(dir_ + ": tensor '" + name + "' is missing from " +
                        (gguf_ ? "the GGUF file (under its blk.N.* name; does llama.block_count name more layers than it holds?)"
                               : "the model's safetensors files"));
    return *it->second;
  }

 private:
  std::string dir_;
  bool gguf_ = false;  // the tensors come from a GGUF file, under their Hugging Face names
  std::map<std::string, const tensor_info*> by_name_;
};

// A quantized [n][k] tensor as F16 in `store` (for the embeddings, read a row at a time).
tensor_info dequantized_f16(const tensor_info& t, std::size_t k, std::vector<std::uint8_t>& store) {
  const std::size_t n = std::size_t(t.shape[0]), rb = t.bytes / n;
  store.resize(n * k * 2);
  std::vector<float> row(k);
  for (std::size_t r = 0; r < n; ++r) {
    if (t.kquant)
      kernels::dequantize_kquant_row(*t.kquant, t.data + r * rb, k, row.data());
    else
      kernels::dequantize_row(*t.quant, t.data + r * rb, k, 0.0f, row.data());
    for (std::size_t i = 0; i < k; ++i) kernels::store_from_f32(store.data(), dtype::f16, r * k + i, row[i]);
  }
  tensor_info out = t;
  out.quant.reset();
  out.kquant.reset();
  out.dtype_name = "F16";
  out.shape = {std::int64_t(n), std::int64_t(k)};
  out.data = store.data();
  out.bytes = store.size();
  return out;
}

// Packs the row-wise concatenation of several [n_i][k] tensors of one dtype.
kernels::packed_weight pack_rows(const std::vector<const tensor_info*>& parts) {
  const dtype type = parts[0]->type();
  for (auto* p : parts)
    if (p->type() != type)
      throw input_error(p->file + ": tensor '" + p->name + "' is " + p->dtype_name + " but '" +
                        parts[0]->name + "' is " + parts[0]->dtype_name + "; fused projections need one dtype");
  if (parts.size() == 1) return kernels::pack_weight(parts[0]->data, type, std::size_t(parts[0]->shape[0]), std::size_t(parts[0]->shape[1]));
  std::size_t rows = 0, bytes = 0;
  for (auto* p : parts) rows += std::size_t(p->shape[0]), bytes += p->bytes;
  std::vector<std::uint8_t> joined(bytes);
  std::size_t off = 0;
  for (auto* p : parts) {
    std::memcpy(joined.data() + off, p->data, p->bytes);
    off += p->bytes;
  }
  return kernels::pack_weight(joined.data(), type, rows, std::size_t(parts[0]->shape[1]));
}

// The row-wise concatenation of several projections (see tensor_index::get_linear) as the
// kernels want it: plain panels, or quantized ones with the int8 row scales alongside.
// Parts stored in different formats (a GGUF mix such as Q4_K_M) become a stack of weights,
// each read by its own kernel.
kernels::linear_weight linear_of(const tensor_index& idx, const std::vector<const tensor_info*>& parts, std::int64_t k) {
  const auto quant = parts[0]->quant;
  const auto kquant = parts[0]->kquant;
  const bool one_format = std::all_of(parts.begin(), parts.end(), [&](const tensor_info* p) {
    return p->quant == quant && p->kquant == kquant && p->dtype_name == parts[0]->dtype_name;
  });
  if (!one_format) {
    std::vector<kernels::linear_weight> stack;
    for (auto* p : parts) stack.push_back(linear_of(idx, {p}, k));
    return kernels::linear_weight(std::move(stack));
  }
  if (kquant) {
    std::vector<std::uint8_t> joined;
    std::size_t rows = 0;
    for (auto* p : parts) rows += std::size_t(p->shape[0]), joined.insert(joined.end(), p->data, p->data + p->bytes);
    return kernels::make_kquant_weight(*kquant, joined.data(), rows, std::size_t(k));
  }
  if (!quant) return pack_rows(parts);
  std::size_t rows = 0;
  std::vector<std::uint8_t> joined;
  std::vector<float> scales;
  for (auto* p : parts) {
    rows += std::size_t(p->shape[0]);
    joined.insert(joined.end(), p->data, p->data + p->bytes);
    if (*quant == kernels::quant_type::int8) {
      const auto s = idx.get(p->name + "_scale", {p->shape[0]}).to_f32();
      scales.insert(scales.end(), s.begin(), s.end());
    }
  }
  return kernels::pack_quant_weight(*quant, joined.data(), scales.empty() ? nullptr : scales.data(), rows, std::size_t(k));
}

// Rows [r0, r1) of a [n][k] tensor: a view into the same mapping.
tensor_info rows_of(const tensor_info& t, std::int64_t r0, std::int64_t r1) {
  if (r0 == 0 && r1 == t.shape[0]) return t;
  tensor_info v = t;
  const std::size_t row_bytes = t.bytes / std::size_t(t.shape[0]);
  v.data = t.data + std::size_t(r0) * row_bytes;
  v.shape = {r1 - r0, t.shape[1]};
  v.bytes = std::size_t(r1 - r0) * row_bytes;
  return v;
}

// Columns [c0, c1) of a [n][k] tensor, copied into `store` (which the view then points into).
tensor_info cols_of(const tensor_info& t, std::int64_t c0, std::int64_t c1, std::vector<std::uint8_t>& store) {
  if (c0 == 0 && c1 == t.shape[1]) return t;
  const std::size_t es = t.bytes / std::size_t(t.numel()), n = std::size_t(t.shape[0]);
  const std::size_t in_row = std::size_t(t.shape[1]) * es, out_row = std::size_t(c1 - c0) * es;
  store.resize(n * out_row);
  for (std::size_t r = 0; r < n; ++r) std::memcpy(store.data() + r * out_row, t.data + r * in_row + std::size_t(c0) * es, out_row);
  tensor_info v = t;
  v.data = store.data();
  v.shape = {t.shape[0], c1 - c0};
  v.bytes = store.size();
  return v;
}

std::vector<float> slice(std::vector<float> v, std::int64_t b, std::int64_t e) {
  return std::vector<float>(v.begin() + b, v.begin() + e);
}

// A norm's weights as the forward multiplies by them: Gemma's folders store weight - 1.
std::vector<float> offset_norm(const model_config& c, std::vector<float> w) {
  for (auto& x : w) x += c.norm_offset;
  return w;
}

// A layer's norms (model_config::layer_norms). Before attention and MLP (Llama):
// input_layernorm and post_attention_layernorm. Sandwiched (Gemma 2/3): post_attention_layernorm
// is on the attention's output, and pre_/post_feedforward_layernorm surround the MLP. After only
// (OLMo2): post_attention_layernorm and post_feedforward_layernorm on the outputs.
void read_norms(const tensor_index& idx, const model_config& c, const std::string& p, layer_weights& w) {
  const std::int64_t H = c.hidden_size;
  auto norm = [&](const std::string& name) { return offset_norm(c, idx.get(p + name + ".weight", {H}).to_f32()); };
  using norms = model_config::norms;
  if (c.layer_norms != norms::post) w.input_norm = norm("input_layernorm");
  if (c.layer_norms == norms::pre) {
    w.post_norm = norm("post_attention_layernorm");
    return;
  }
  w.attn_out_norm = norm("post_attention_layernorm");
  w.mlp_out_norm = norm("post_feedforward_layernorm");
  if (c.layer_norms == norms::sandwich) w.post_norm = norm("pre_feedforward_layernorm");
}

// Reads one layer's weights as this rank holds them: its heads, KV heads and MLP features
// (everything when whole). Quantized projections are whole (load_tensors checks it).
struct layer_reader {
  const tensor_index& idx;
  const model_config& cfg;
  const tensor_shard& shard;
  std::optional<kernels::quant_type> quant;
  std::int64_t h0, h1, g0, g1;  // this rank's query heads and KV heads
  std::vector<std::uint8_t> scratch;

  void attention(const std::string& p, layer_weights& w) {
    const std::int64_t H = cfg.hidden_size, Q = cfg.q_dim(), KV = cfg.kv_dim(), hd = cfg.head_dim;
    tensor_info q, k, v;
    if (cfg.fused_projections) {  // Phi-3: one qkv_proj, q then k then v rows
      const auto& all = idx.get_linear(p + "self_attn.qkv_proj.weight", Q + 2 * KV, H, quant);
      q = rows_of(all, h0 * hd, h1 * hd);
      k = rows_of(all, Q + g0 * hd, Q + g1 * hd);
      v = rows_of(all, Q + KV + g0 * hd, Q + KV + g1 * hd);
    } else {
      q = rows_of(idx.get_linear(p + "self_attn.q_proj.weight", Q, H, quant), h0 * hd, h1 * hd);
      k = rows_of(idx.get_linear(p + "self_attn.k_proj.weight", KV, H, quant), g0 * hd, g1 * hd);
      v = rows_of(idx.get_linear(p + "self_attn.v_proj.weight", KV, H, quant), g0 * hd, g1 * hd);
    }
    w.qkv = linear_of(idx, {&q, &k, &v}, H);
    if (cfg.attention_bias) {
      for (const char* n : {"q_proj", "k_proj", "v_proj"}) {
        const bool is_q = std::string(n) == "q_proj";
        auto b = idx.get(p + "self_attn." + n + ".bias", {is_q ? Q : KV}).to_f32();
        b = is_q ? slice(std::move(b), h0 * hd, h1 * hd) : slice(std::move(b), g0 * hd, g1 * hd);
        w.qkv_bias.insert(w.qkv_bias.end(), b.begin(), b.end());
      }
    }
    const auto& o_all = idx.get_linear(p + "self_attn.o_proj.weight", H, Q, quant);
    const auto o = in_blocks(o_all) ? o_all : cols_of(o_all, h0 * hd, h1 * hd, scratch);
    w.o = linear_of(idx, {&o}, Q);
    if (cfg.qk_norm) {
      // Each head's (Qwen3, Gemma 3), or the whole projection's (OLMo2; only whole models hold it).
      w.q_norm = offset_norm(cfg, idx.get(p + "self_attn.q_norm.weight", {cfg.qk_norm_whole ? Q : hd}).to_f32());
      w.k_norm = offset_norm(cfg, idx.get(p + "self_attn.k_norm.weight", {cfg.qk_norm_whole ? KV : hd}).to_f32());
    }
  }

  // A SwiGLU MLP of `n` features: this rank's range of them (all of them when `whole`). With no
  // `up_name`, `gate_name` is a fused gate_up tensor of 2n rows.
  mlp_weights mlp(const std::string& gate_name, const std::string& up_name, const std::string& down_name, std::int64_t n,
                  bool whole = false) {
    const std::int64_t H = cfg.hidden_size;
    const auto [f0, f1] = whole ? std::pair<std::int64_t, std::int64_t>{0, n} : shard_range(n, shard.rank, shard.size);
    tensor_info gate, up;
    if (up_name.empty()) {  // Phi-3: one gate_up_proj, the gate's rows then the up's
      const auto& both = idx.get_linear(gate_name, 2 * n, H, quant);
      gate = rows_of(both, f0, f1);
      up = rows_of(both, n + f0, n + f1);
    } else {
      gate = rows_of(idx.get_linear(gate_name, n, H, quant), f0, f1);
      up = rows_of(idx.get_linear(up_name, n, H, quant), f0, f1);
    }
    const auto& down_all = idx.get_linear(down_name, H, n, quant);
    const auto down = in_blocks(down_all) ? down_all : cols_of(down_all, f0, f1, scratch);
    return mlp_weights{linear_of(idx, {&gate, &up}, H), linear_of(idx, {&down}, n)};
  }

  // A mixture-of-experts layer. Expert parallel: this rank's experts whole (and the shared
  // expert whole on every rank); else every expert, each sliced like a dense MLP.
  std::unique_ptr<moe_weights> moe(const std::string& p) {
    const auto& mc = *cfg.moe;
    const bool mixtral = mc.layout == moe_layout::mixtral;
    const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
    auto m = std::make_unique<moe_weights>();
    m->router = pack_rows({&idx.get(block + "gate.weight", {mc.num_experts, cfg.hidden_size})});
    const bool ep = shard.expert_parallel && !shard.whole();
    const auto [e0, e1] = ep ? shard_range(mc.num_experts, shard.rank, shard.size) : std::pair<std::int64_t, std::int64_t>{0, mc.num_experts};
    m->first_expert = int(e0);
    for (auto e = e0; e < e1; ++e) {
      const std::string x = block + "experts." + std::to_string(e) + ".";
      m->experts.push_back(mixtral ? mlp(x + "w1.weight", x + "w3.weight", x + "w2.weight", mc.expert_intermediate_size, ep)
                                   : mlp(x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight",
                                         mc.expert_intermediate_size, ep));
    }
    if (mc.shared_expert_intermediate_size > 0) {
      const std::string x = block + "shared_expert.";
      m->shared = mlp(x + "gate_proj.weight", x + "up_proj.weight", x + "down_proj.weight", mc.shared_expert_intermediate_size, ep);
      m->shared_gate = idx.get(block + "shared_expert_gate.weight", {1, cfg.hidden_size}).to_f32();
    }
    return m;
  }
};

}  // namespace

std::unique_ptr<llama_model> llama_model::load(const std::string& dir, const std::function<void(int, int)>& progress,
                                               tensor_shard shard) {
  std::unique_ptr<llama_model> m(new llama_model());
  m->dir_ = dir;
  if (is_gguf_path(dir)) {  // parsed once: the config and the tensors come from the same file
    m->gguf_ = std::make_unique<gguf_file>(dir);
    m->cfg_ = gguf_model_config(*m->gguf_);
  } else {
    m->cfg_ = load_model_config(dir);
  }
  if (shard.rank < 0 || shard.rank >= shard.size) throw std::invalid_argument("llama_model::load: bad tensor shard");
  if (auto why = shard.expert_parallel ? expert_parallel_mismatch(m->cfg_, shard.size) : tensor_parallel_mismatch(m->cfg_, shard.size))
    throw input_error(dir + ": " + *why);
  m->shard_ = shard;
  m->load_tensors(dir, progress);
  m->inv_freq_ = m->cfg_.rope_inv_freq();
  if (m->cfg_.local_rope_theta > 0) m->inv_freq_local_ = m->cfg_.rope_inv_freq(true);
  return m;
}

void llama_model::load_tensors(const std::string& dir, const std::function<void(int, int)>& progress) {
  std::vector<tensor_info> from_gguf;      // a GGUF file's tensors under Hugging Face names
  std::vector<std::vector<std::uint8_t>> unpermuted;  // their storage where it differs from the file's
  if (gguf_) {
    from_gguf = gguf_model_tensors(*gguf_, cfg_, unpermuted);
  } else {
    const std::vector<std::string> paths = model_safetensors_files(dir);
    if (paths.empty()) throw input_error(dir + ": no *.safetensors files");
    for (auto& p : paths) files_.push_back(std::make_unique<safetensors_file>(p));
  }
  tensor_index idx = gguf_ ? tensor_index(from_gguf, dir) : tensor_index(files_, dir);

  const std::int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
  // This rank's heads, KV heads, features and vocabulary (everything when whole).
  const auto [h0, h1] = shard_range(cfg_.num_attention_heads, shard_.rank, shard_.size);
  const auto [g0, g1] = shard_range(cfg_.num_key_value_heads, shard_.rank, shard_.size);
  const auto [i0, i1] = shard_range(I, shard_.rank, shard_.size);  // a dense MLP's features
  std::tie(vocab0_, vocab1_) = shard_range(V, shard_.rank, shard_.size);
  n_heads_ = int(h1 - h0);
  n_kv_ = int(g1 - g0);
  inter_ = int(i1 - i0);
  // Quantized projections are loaded whole: slicing their blocks across tensor ranks is not built.
  const std::optional<kernels::quant_type> quant = cfg_.weight_quant;
  const bool quantized = quant || idx.any_quantized();  // by config.json, or tensor by tensor in a GGUF file
  if (quantized && !shard_.whole())
    throw input_error(dir + ": a model with " + std::string(quant ? kernels::quant_name(*quant) : "quantized") +
                      " weights cannot be split across tensor-parallel ranks yet; serve it with tensor_parallel = 1");
  embed_ = idx.get_linear("model.embed_tokens.weight", V, H, std::nullopt);
  if (in_blocks(embed_)) embed_ = dequantized_f16(embed_, std::size_t(H), embed_store_);  // rows are read one token at a time
  weight_type_ = embed_.type();
  layer_reader read{idx, cfg_, shard_, quant, h0, h1, g0, g1, {}};
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layer_weights w;
    read_norms(idx, cfg_, p, w);
    read.attention(p, w);
    if (!cfg_.is_moe_layer(l)) {
      auto dense = cfg_.fused_projections ? read.mlp(p + "mlp.gate_up_proj.weight", "", p + "mlp.down_proj.weight", I)
                                          : read.mlp(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight", I);
      w.gate_up = std::move(dense.gate_up);
      w.down = std::move(dense.down);
    } else {
      w.moe = read.moe(p);
    }
    layers_.push_back(std::move(w));
    if (progress) progress(l + 1, cfg_.num_hidden_layers);
  }
  final_norm_ = offset_norm(cfg_, idx.get("model.norm.weight", {H}).to_f32());
  if (cfg_.tie_word_embeddings || !idx.has("lm_head.weight")) {
    if (!cfg_.tie_word_embeddings)
      throw input_error(dir + ": tensor 'lm_head.weight' is missing and tie_word_embeddings is false");
    const auto head = rows_of(embed_, vocab0_, vocab1_);
    lm_head_ = pack_rows({&head});
  } else {
    const auto head = rows_of(idx.get_linear("lm_head.weight", V, H, std::nullopt), vocab0_, vocab1_);
    lm_head_ = linear_of(idx, {&head}, H);
  }
}

namespace {

// A tensor-parallel rank's check that it was handed its own group.
// Each adapter span's share of projection `t` of layer `l`: x rows `x_width` wide, added into
// out rows `out_stride` apart from column `offset` (a fused projection's slice).
void add_lora(const forward_batch& b, int l, lora_target t, const float* x, std::size_t x_width, float* out, std::size_t out_stride,
              std::size_t offset, std::vector<float>& scratch) {
  for (const auto& s : b.adapters) {
    const auto& adapted = s.adapter->layers[std::size_t(l)];
    const auto m = adapted.find(t);
    if (m == adapted.end()) continue;
    apply_lora(m->second, x + std::size_t(s.first) * x_width, std::size_t(s.count), out + std::size_t(s.first) * out_stride + offset,
               out_stride, scratch);
  }
}

// Adapter spans must lie in the batch, apart, on a whole model of the adapters' depth.
void check_adapters(const forward_batch& b, const tensor_shard& shard, int layers) {
  if (b.adapters.empty()) return;
  if (!shard.whole()) throw std::invalid_argument("forward: LoRA adapters run on whole models only, not on a tensor or expert shard");
  std::int32_t end = 0;
  for (const auto& s : b.adapters) {
    if (!s.adapter || s.first < end || s.count < 0 || std::size_t(s.first) + std::size_t(s.count) > b.tokens.size() ||
        s.adapter->layers.size() != std::size_t(layers))
      throw std::invalid_argument("forward: adapter spans must be in order, apart, inside the batch, for this model's layers");
    end = s.first + s.count;
  }
}

void check_group(const tensor_shard& s, const collectives::communicator* tp) {
  const int n = tp ? tp->size() : 1, r = tp ? tp->rank() : 0;
  if (n != s.size || r != s.rank)
    throw std::invalid_argument("llama_model: a model of tensor rank " + std::to_string(s.rank) + " of " + std::to_string(s.size) +
                                " was run as rank " + std::to_string(r) + " of " + std::to_string(n));
}

}  // namespace

std::size_t llama_model::weight_bytes_per_step() const {
  std::size_t b = lm_head_.bytes();
  for (auto& l : layers_) {
    b += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
    if (!l.moe) continue;
    b += l.moe->router.bytes() + l.moe->shared.gate_up.bytes() + l.moe->shared.down.bytes();
    for (auto& e : l.moe->experts) b += e.gate_up.bytes() + e.down.bytes();  // a big enough batch reads them all
  }
  return b;
}

std::map<std::string, std::size_t> llama_model::projection_bytes_by_format() const {
  std::map<std::string, std::size_t> by;
  for (auto& l : layers_) {
    for (auto* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) w->add_bytes_by_format(by);
    if (!l.moe) continue;
    for (auto* w : {&l.moe->shared.gate_up, &l.moe->shared.down}) w->add_bytes_by_format(by);
    for (auto& e : l.moe->experts) e.gate_up.add_bytes_by_format(by), e.down.add_bytes_by_format(by);
  }
  return by;
}

bool llama_model::projections_int8_dot() const {
  return std::all_of(layers_.begin(), layers_.end(), [](const layer_weights& l) {
    return !l.moe && l.qkv.int8_dot() && l.o.int8_dot() && l.gate_up.int8_dot() && l.down.int8_dot();
  });
}

std::string llama_model::lm_head_format() const {
  std::map<std::string, std::size_t> by;
  lm_head_.add_bytes_by_format(by);
  std::string out;
  for (auto& [f, b] : by) out += (out.empty() ? "" : "+") + f;
  return out;
}

std::size_t llama_model::layer_flops_per_token() const {
  std::size_t macs = 0;
  for (auto& l : layers_) {
    macs += l.qkv.n * l.qkv.k + l.o.n * l.o.k + l.gate_up.n * l.gate_up.k + l.down.n * l.down.k;
    if (!l.moe) continue;
    const auto& m = *l.moe;
    macs += m.router.n * m.router.k + m.shared.gate_up.n * m.shared.gate_up.k + m.shared.down.n * m.shared.down.k;
    if (!m.experts.empty())  // each token through experts_per_token of them
      macs += std::size_t(cfg_.moe->experts_per_token) * (m.experts[0].gate_up.n * m.experts[0].gate_up.k + m.experts[0].down.n * m.experts[0].down.k);
  }
  return 2 * macs;
}

void llama_model::forward(const forward_batch& b, kv::kv_cache& cache, float* logits, forward_workspace& w,
                          collectives::communicator* tp) const {
  if (b.tokens.empty()) return;
  embed(b, w);
  run_layers(b, 0, num_layers(), cache, w, tp);
  head(b, w, logits, tp);
}

void llama_model::embed(const forward_batch& b, forward_workspace& w) const {
  const std::size_t T = b.tokens.size(), H = cfg_.hidden_size;
  w.x.resize(T * H);
  op_timer timer(op::embed);
  const dtype et = embed_.type();
  const float scale = float(cfg_.embedding_scale);  // Gemma: sqrt(hidden), in float as both references compute it
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < H; ++i)
      w.x[t * H + i] = kernels::load_as_f32(embed_.data, et, std::size_t(b.tokens[t]) * H + i) * scale;
}

void llama_model::run_layers(const forward_batch& b, int first, int last, kv::kv_cache& cache,
                             forward_workspace& w, collectives::communicator* tp) const {
  const std::size_t T = b.tokens.size();
  if (T == 0) return;
  check_group(shard_, tp);
  check_adapters(b, shard_, num_layers());
  if (shard_.whole()) tp = nullptr;  // a group of one has nothing to add up
  // This rank's heads and features (all of them when whole).
  const std::size_t H = cfg_.hidden_size, I = std::size_t(inter_), hd = cfg_.head_dim;
  const std::size_t Q = std::size_t(n_heads_) * hd, KV = std::size_t(n_kv_) * hd, half = std::size_t(cfg_.rotated_dims()) / 2;
  if (first < 0 || last > num_layers() || first > last || w.x.size() != T * H)
    throw std::invalid_argument("run_layers: bad layer range or hidden state size");
  if (cache.n_kv_heads() != n_kv_) throw std::invalid_argument("run_layers: the cache holds another number of KV heads");
  w.h.resize(T * H);
  w.qkv.resize(T * (Q + 2 * KV));
  w.q.resize(T * Q);
  w.k.resize(T * KV);
  w.attn.resize(T * Q);
  w.tmp.resize(T * H);
  w.gu.resize(T * 2 * I);
  w.act.resize(T * I);
  {
    op_timer timer(op::rope);
    w.cos.resize(T * half);
    w.sin.resize(T * half);
    kernels::rope_tables(b.positions.data(), T, inv_freq_.data(), half, w.cos.data(), w.sin.data());
    if (const float m = float(cfg_.rope_magnitude()); m != 1.0f)  // longrope's attention factor
      for (std::size_t i = 0; i < T * half; ++i) w.cos[i] *= m, w.sin[i] *= m;
    if (!inv_freq_local_.empty()) {
      w.cos_local.resize(T * half);
      w.sin_local.resize(T * half);
      kernels::rope_tables(b.positions.data(), T, inv_freq_local_.data(), half, w.cos_local.data(), w.sin_local.data());
    }
  }
  for (int l = first; l < last; ++l) {
    const layer_weights& L = layers_[std::size_t(l)];
    pre_norm(L.input_norm, T, w);
    attention_sublayer(b, l, l - first, cache, w, tp);  // the cache holds this range's layers only
    add_residual(L.attn_out_norm, T, w);
    pre_norm(L.post_norm, T, w);
    mlp_sublayer(b, l, w, tp);
    add_residual(L.mlp_out_norm, T, w);
  }
}

// w.h = a sublayer's input: x normed, or x itself where the family norms outputs only (OLMo2).
void llama_model::pre_norm(const std::vector<float>& norm, std::size_t T, forward_workspace& w) const {
  const std::size_t H = cfg_.hidden_size;
  op_timer timer(op::rmsnorm);
  if (norm.empty()) std::memcpy(w.h.data(), w.x.data(), T * H * 4);
  else kernels::rmsnorm(w.x.data(), T, H, norm.data(), float(cfg_.rms_norm_eps), w.h.data());
}

// x += w.tmp: normed first where the family norms a sublayer's output (Gemma, OLMo2), scaled by
// the residual multiplier (Granite).
void llama_model::add_residual(const std::vector<float>& out_norm, std::size_t T, forward_workspace& w) const {
  const std::size_t H = cfg_.hidden_size;
  if (!out_norm.empty()) {
    op_timer timer(op::rmsnorm);
    w.act.resize(std::max(w.act.size(), T * H));
    kernels::rmsnorm(w.tmp.data(), T, H, out_norm.data(), float(cfg_.rms_norm_eps), w.act.data());
    std::memcpy(w.tmp.data(), w.act.data(), T * H * 4);
  }
  op_timer timer(op::residual);
  if (cfg_.residual_scale != 1.0) {
    const float r = float(cfg_.residual_scale);
    for (std::size_t i = 0; i < T * H; ++i) w.x[i] += w.tmp[i] * r;
    return;
  }
  for (std::size_t i = 0; i < T * H; ++i) w.x[i] += w.tmp[i];
}

// Layer l's attention over w.h, into w.tmp (summed over the tensor group): the q/k/v projection,
// the per-head norms, RoPE (the windowed layers' own frequencies where they differ), the cache
// write, paged attention (the layer's window, the family's scale and soft cap) and o_proj.
void llama_model::attention_sublayer(const forward_batch& b, int l, int cl, kv::kv_cache& cache, forward_workspace& w,
                                     collectives::communicator* tp) const {
  const layer_weights& L = layers_[std::size_t(l)];
  const std::size_t T = b.tokens.size(), H = cfg_.hidden_size, hd = cfg_.head_dim;
  const std::size_t Q = std::size_t(n_heads_) * hd, KV = std::size_t(n_kv_) * hd, QKV = Q + 2 * KV;
  const float eps = float(cfg_.rms_norm_eps);
  {
    op_timer timer(op::qkv_proj);
    kernels::linear(w.h.data(), T, L.qkv, L.qkv_bias.empty() ? nullptr : L.qkv_bias.data(), w.qkv.data());
    add_lora(b, l, lora_target::q_proj, w.h.data(), H, w.qkv.data(), QKV, 0, w.lora);
    add_lora(b, l, lora_target::k_proj, w.h.data(), H, w.qkv.data(), QKV, Q, w.lora);
    add_lora(b, l, lora_target::v_proj, w.h.data(), H, w.qkv.data(), QKV, Q + KV, w.lora);
  }
  const int window = cfg_.window_of(l);
  {
    op_timer timer(op::rope);
    for (std::size_t t = 0; t < T; ++t) {
      std::memcpy(&w.q[t * Q], &w.qkv[t * QKV], Q * 4);
      std::memcpy(&w.k[t * KV], &w.qkv[t * QKV + Q], KV * 4);
    }
    if (!L.q_norm.empty()) {  // before RoPE: each head on its own (Qwen3, Gemma 3) or the whole projection (OLMo2)
      const bool whole = cfg_.qk_norm_whole;
      w.tmp.resize(std::max(T * Q, T * H));
      kernels::rmsnorm(w.q.data(), whole ? T : T * std::size_t(n_heads_), whole ? Q : hd, L.q_norm.data(), eps, w.tmp.data());
      std::memcpy(w.q.data(), w.tmp.data(), T * Q * 4);
      kernels::rmsnorm(w.k.data(), whole ? T : T * std::size_t(n_kv_), whole ? KV : hd, L.k_norm.data(), eps, w.tmp.data());
      std::memcpy(w.k.data(), w.tmp.data(), T * KV * 4);
    }
    if (cfg_.layer_rope.empty() || cfg_.layer_rope[std::size_t(l)] != 0) {  // SmolLM3 leaves every fourth layer unrotated
      const bool local = window > 0 && !inv_freq_local_.empty();
      const float* cos = local ? w.cos_local.data() : w.cos.data();
      const float* sin = local ? w.sin_local.data() : w.sin.data();
      const std::size_t rot = std::size_t(cfg_.rotated_dims());
      kernels::rope(w.q.data(), T, std::size_t(n_heads_), hd, rot, cos, sin);
      kernels::rope(w.k.data(), T, std::size_t(n_kv_), hd, rot, cos, sin);
    }
  }
  // A windowed layer of a cache split by window groups reads and writes its group's pages.
  const int group = cache.group(cl);
  if (group > 0 && std::size_t(group) > b.group_tables.size())
    throw std::logic_error("forward: layer " + std::to_string(l) + " is in window group " + std::to_string(group) +
                           " but the batch carries " + std::to_string(b.group_tables.size()) + " group tables");
  const std::int32_t* const* tables = group == 0 ? b.tables.data() : b.group_tables[std::size_t(group - 1)].data();
  {
    op_timer timer(op::kv_write);
    const int bs = cache.block_size();
    for (std::size_t t = 0; t < T; ++t) {
      const std::int32_t p = b.positions[t];
      cache.write(cl, tables[t][p / bs], p % bs, &w.k[t * KV], &w.qkv[t * QKV + Q + KV]);
    }
  }
  {
    op_timer timer(op::attention);
    const float scale = cfg_.attention_multiplier > 0 ? float(cfg_.attention_multiplier)
                                                      : 1.0f / std::sqrt(float(cfg_.attention_scalar > 0 ? cfg_.attention_scalar : double(hd)));
    const kernels::attention_options opt{scale, window, float(cfg_.attn_softcap)};
    kernels::paged_attention(w.q.data(), T, n_heads_, b.positions.data(), tables, cache.layer(cl), opt, w.attn.data());
  }
  {
    op_timer timer(op::o_proj);
    kernels::linear(w.attn.data(), T, L.o, nullptr, w.tmp.data());
    add_lora(b, l, lora_target::o_proj, w.attn.data(), Q, w.tmp.data(), H, 0, w.lora);
  }
  if (tp) { op_timer timer(op::all_reduce); tp->all_reduce({w.tmp.data(), T * H}); }
}

// Layer l's MLP (dense or mixture of experts) over w.h, into w.tmp: summed over the tensor group
// unless an expert-parallel dispatch already returned whole rows.
void llama_model::mlp_sublayer(const forward_batch& b, int l, forward_workspace& w, collectives::communicator* tp) const {
  const layer_weights& L = layers_[std::size_t(l)];
  const std::size_t T = b.tokens.size(), H = cfg_.hidden_size, I = std::size_t(inter_);
  const bool whole_out = L.moe && tp && shard_.expert_parallel;  // the dispatch returns whole rows, not partial sums
  if (L.moe) {
    std::fill(w.tmp.begin(), w.tmp.begin() + std::ptrdiff_t(T * H), 0.0f);
    if (whole_out)
      moe_dispatch(*L.moe, w.h.data(), T, w.tmp.data(), w, *tp);
    else
      moe_mlp(*L.moe, w.h.data(), T, w.tmp.data(), w);
  } else {
    {
      op_timer timer(op::gate_up_proj);
      kernels::linear(w.h.data(), T, L.gate_up, nullptr, w.gu.data());
      add_lora(b, l, lora_target::gate_proj, w.h.data(), H, w.gu.data(), 2 * I, 0, w.lora);
      add_lora(b, l, lora_target::up_proj, w.h.data(), H, w.gu.data(), 2 * I, I, w.lora);
    }
    {
      op_timer timer(op::swiglu);
      if (cfg_.gelu_mlp) kernels::geglu(w.gu.data(), T, I, w.act.data());
      else kernels::swiglu(w.gu.data(), T, I, w.act.data());
    }
    {
      op_timer timer(op::down_proj);
      kernels::linear(w.act.data(), T, L.down, nullptr, w.tmp.data());
      add_lora(b, l, lora_target::down_proj, w.act.data(), I, w.tmp.data(), H, 0, w.lora);
    }
  }
  if (tp && !whole_out) { op_timer timer(op::all_reduce); tp->all_reduce({w.tmp.data(), T * H}); }
}

void llama_model::head(const forward_batch& b, forward_workspace& w, float* logits, collectives::communicator* tp) const {
  check_group(shard_, tp);
  const std::size_t H = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps);
  const std::size_t R = b.logit_rows.size();
  {
    op_timer timer(op::lm_head);
    w.logits_in.resize(R * H);
    for (std::size_t r = 0; r < R; ++r)
      kernels::rmsnorm(&w.x[std::size_t(b.logit_rows[r]) * H], 1, H, final_norm_.data(), eps, &w.logits_in[r * H]);
    if (shard_.whole()) {
      kernels::linear(w.logits_in.data(), R, lm_head_, nullptr, logits);
      return cap_logits(logits, R);
    }
  }
  // Vocabulary-parallel: each rank computes its slice of every row, padded to the largest
  // slice so that one all-gather brings every rank's; then the rows are put back together.
  const std::size_t V = std::size_t(cfg_.vocab_size), N = std::size_t(shard_.size);
  const std::size_t most = (V + N - 1) / N, mine = std::size_t(vocab1_ - vocab0_);
  w.logits_part.assign(R * most, 0.0f);
  w.tmp.resize(R * mine);
  {
    op_timer timer(op::lm_head);
    kernels::linear(w.logits_in.data(), R, lm_head_, nullptr, w.tmp.data());
    for (std::size_t r = 0; r < R; ++r) std::memcpy(&w.logits_part[r * most], &w.tmp[r * mine], mine * 4);
  }
  w.logits_all.resize(N * R * most);
  {
    op_timer timer(op::all_gather);
    tp->all_gather(w.logits_part, w.logits_all);
  }
  for (std::size_t k = 0; k < N; ++k) {
    const auto [v0, v1] = shard_range(std::int64_t(V), int(k), int(N));
    for (std::size_t r = 0; r < R; ++r)
      std::memcpy(logits + r * V + std::size_t(v0), &w.logits_all[(k * R + r) * most], std::size_t(v1 - v0) * 4);
  }
  cap_logits(logits, R);
}

// Granite's logits_scaling divides the logits; Gemma 2's final soft cap makes them c * tanh(logit / c).
void llama_model::cap_logits(float* logits, std::size_t rows) const {
  if (cfg_.logit_divisor != 1.0) {
    const float d = float(cfg_.logit_divisor);
    for (std::size_t i = 0; i < rows * std::size_t(cfg_.vocab_size); ++i) logits[i] /= d;
  }
  if (cfg_.final_softcap <= 0) return;
  const float c = float(cfg_.final_softcap);
  for (std::size_t i = 0; i < rows * std::size_t(cfg_.vocab_size); ++i) logits[i] = c * std::tanh(logits[i] / c);
}

std::vector<std::vector<float>> llama_model::pool(const forward_workspace& w, const std::vector<row_span>& spans) const {
  if (spans.empty()) return {};  // most steps: no embedding, no scratch
  const std::size_t H = cfg_.hidden_size;
  std::vector<float> normed(H);
  std::vector<double> sum(H);
  std::vector<std::vector<float>> out;
  out.reserve(spans.size());
  for (const auto& s : spans) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (std::int32_t r = s.first; r < s.first + s.count; ++r) {
      kernels::rmsnorm(&w.x[std::size_t(r) * H], 1, H, final_norm_.data(), float(cfg_.rms_norm_eps), normed.data());
      for (std::size_t d = 0; d < H; ++d) sum[d] += normed[d];
    }
    out.emplace_back(sum.begin(), sum.end());
  }
  return out;
}

std::shared_ptr<const llama_model> shared_shard(const std::string& dir, tensor_shard shard) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int, bool>, std::weak_ptr<const llama_model>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = loaded[{dir, shard.rank, shard.size, shard.expert_parallel}];
  if (auto m = slot.lock()) return m;
  std::shared_ptr<const llama_model> m = llama_model::load(dir, {}, shard);
  slot = m;
  return m;
}

}  // namespace troupe::model
