#include "runtime/model/lora.h"

#include <cmath>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include <nlohmann/json.hpp>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"
#include "runtime/kv/block_hash.h"
#include "runtime/model/safetensors.h"

namespace troupe::model {

namespace {

constexpr lora_target all_targets[] = {lora_target::q_proj, lora_target::k_proj,    lora_target::v_proj,  lora_target::o_proj,
                                       lora_target::gate_proj, lora_target::up_proj, lora_target::down_proj};

std::optional<lora_target> target_of(const std::string& name) {
  for (auto t : all_targets)
    if (name == lora_target_name(t)) return t;
  return std::nullopt;
}

// (in, out) of a projection of `c`.
std::pair<int, int> shape_of(lora_target t, const model_config& c) {
  switch (t) {
    case lora_target::q_proj: return {c.hidden_size, c.q_dim()};
    case lora_target::k_proj:
    case lora_target::v_proj: return {c.hidden_size, c.kv_dim()};
    case lora_target::o_proj: return {c.q_dim(), c.hidden_size};
    case lora_target::gate_proj:
    case lora_target::up_proj: return {c.hidden_size, c.intermediate_size};
    case lora_target::down_proj: return {c.intermediate_size, c.hidden_size};
  }
  return {0, 0};
}

struct lora_config {
  int rank = 8;  // PEFT's defaults
  double alpha = 8;
  bool rslora = false;
  std::string base_model;
  // rank_pattern: a module whose name ends in a key's pattern has that rank instead of r.
  std::vector<std::pair<std::regex, int>> rank_pattern;

  // The rank adapter_config.json gives module `name` ("model.layers.0.self_attn.q_proj"), as
  // PEFT matches rank_pattern's keys: the first whose pattern ends the name at a dot.
  int rank_of(const std::string& name) const {
    for (const auto& [re, r] : rank_pattern)
      if (std::regex_match(name, re)) return r;
    return rank;
  }
};

bool empty_or_null(const nlohmann::json& j) { return j.is_null() || (j.is_object() || j.is_array() ? j.empty() : false); }

lora_config read_config(const std::string& path) {
  if (!std::filesystem::exists(path)) throw input_error(path + ": cannot be read (a PEFT adapter folder has adapter_config.json)");
  const nlohmann::json j = parse_json(read_regular_file(path, max_json_file_bytes, "adapter_config.json"), path);
  if (!j.is_object()) throw input_error(path + ": not a JSON object");
  auto refuse = [&](const std::string& key, const std::string& why) { throw input_error(path + ": " + key + ": " + why); };
  if (j.contains("peft_type") && j["peft_type"] != "LORA") refuse("peft_type", "only LORA adapters are served, not " + j["peft_type"].dump());
  if (j.value("use_dora", false)) refuse("use_dora", "DoRA adapters are not supported");
  if (j.contains("bias") && j["bias"] != "none") refuse("bias", "adapters with biases are not supported (\"none\" only)");
  if (j.contains("modules_to_save") && !empty_or_null(j["modules_to_save"]))
    refuse("modules_to_save", "fully trained modules are not supported");
  if (j.value("fan_in_fan_out", false)) refuse("fan_in_fan_out", "GPT-2's transposed layout is not supported");
  if (j.contains("alpha_pattern") && !empty_or_null(j["alpha_pattern"])) refuse("alpha_pattern", "per-module alphas are not supported");
  lora_config c;
  if (j.contains("r")) {
    if (!j["r"].is_number_integer() || j["r"].get<long long>() < 1) refuse("r", "expected a positive integer");
    c.rank = j["r"].get<int>();
  }
  if (j.contains("rank_pattern") && !empty_or_null(j["rank_pattern"])) {
    if (!j["rank_pattern"].is_object()) refuse("rank_pattern", "expected an object of module pattern -> rank");
    for (const auto& [key, v] : j["rank_pattern"].items()) {
      if (!v.is_number_integer() || v.get<long long>() < 1) refuse("rank_pattern", "\"" + key + "\": expected a positive integer");
      try {
        c.rank_pattern.emplace_back(std::regex("(.*\\.)?(" + key + ")"), v.get<int>());
      } catch (const std::regex_error&) {
        refuse("rank_pattern", "\"" + key + "\" is not a pattern");
      }
    }
  }
  if (j.contains("lora_alpha")) {
    if (!j["lora_alpha"].is_number() || !(j["lora_alpha"].get<double>() > 0)) refuse("lora_alpha", "expected a positive number");
    c.alpha = j["lora_alpha"].get<double>();
  }
  c.rslora = j.value("use_rslora", false);
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()) c.base_model = j["base_model_name_or_path"];
  return c;
}

// base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_<A|B>.weight
struct tensor_role {
  int layer = 0;
  lora_target target{};
  bool is_a = false;
};

std::optional<tensor_role> role_of(const std::string& name) {
  static const std::regex re(R"(^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_(A|B)\.weight$)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return std::nullopt;
  const auto t = target_of(m[3].str());
  if (!t) return std::nullopt;
  const bool attention = *t == lora_target::q_proj || *t == lora_target::k_proj || *t == lora_target::v_proj || *t == lora_target::o_proj;
  if (attention != (m[2].str() == "self_attn")) return std::nullopt;
  return tensor_role{std::stoi(m[1].str()), *t, m[4].str() == "A"};
}

// Checks one A or B tensor's shape against the projection and takes its values.
void take(lora_matrix& m, const tensor_info& t, const tensor_role& r, const model_config& base, const std::string& file) {
  const auto [in, out] = shape_of(r.target, base);
  auto bad = [&](const std::string& why) { throw input_error(file + ": " + t.name + ": " + why); };
  if (t.shape.size() != 2) bad("expected a matrix");
  if (r.is_a) {
    if (t.shape[1] != in) bad("lora_A has " + std::to_string(t.shape[1]) + " columns; the base model's " + lora_target_name(r.target) + " takes " + std::to_string(in));
    m.a = t.to_f32();
    m.rank = int(t.shape[0]);
  } else {
    if (t.shape[0] != out) bad("lora_B has " + std::to_string(t.shape[0]) + " rows; the base model's " + lora_target_name(r.target) + " gives " + std::to_string(out));
    m.b = t.to_f32();
    if (m.rank && t.shape[1] != m.rank) bad("lora_B's rank " + std::to_string(t.shape[1]) + " differs from lora_A's " + std::to_string(m.rank));
    m.rank = int(t.shape[1]);
  }
  m.in = in;
  m.out = out;
}

}  // namespace

const char* lora_target_name(lora_target t) {
  switch (t) {
    case lora_target::q_proj: return "q_proj";
    case lora_target::k_proj: return "k_proj";
    case lora_target::v_proj: return "v_proj";
    case lora_target::o_proj: return "o_proj";
    case lora_target::gate_proj: return "gate_proj";
    case lora_target::up_proj: return "up_proj";
    case lora_target::down_proj: return "down_proj";
  }
  return "?";
}

std::size_t lora_adapter::num_matrices() const {
  std::size_t n = 0;
  for (const auto& l : layers) n += l.size();
  return n;
}

std::size_t lora_adapter::bytes() const {
  std::size_t n = 0;
  for (const auto& l : layers)
    for (const auto& [t, m] : l) n += (m.a.size() + m.b.size()) * sizeof(float);
  return n;
}

lora_adapter read_lora_adapter(const std::string& dir, const model_config& base) {
  namespace fs = std::filesystem;
  const lora_config c = read_config((fs::path(dir) / "adapter_config.json").string());
  const std::string file = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(file)) throw input_error(file + ": missing (a PEFT adapter folder has adapter_model.safetensors)");
  lora_adapter out;
  out.dir = dir;
  out.fingerprint = lora_fingerprint(dir);
  out.base_model = c.base_model;
  out.rank = c.rank;
  out.alpha = c.alpha;
  out.rslora = c.rslora;
  out.layers.resize(std::size_t(base.num_hidden_layers));
  safetensors_file st(file);
  for (const auto& [name, t] : st.tensors()) {
    const auto r = role_of(name);
    if (!r) throw input_error(file + ": " + name + ": not a LoRA matrix of an attention or dense MLP projection (the only ones served)");
    if (r->layer >= base.num_hidden_layers)
      throw input_error(file + ": " + name + ": layer " + std::to_string(r->layer) + ", but the base model has " +
                        std::to_string(base.num_hidden_layers));
    if (base.is_moe_layer(r->layer)) throw input_error(file + ": " + name + ": layer " + std::to_string(r->layer) + " is a mixture of experts");
    take(out.layers[std::size_t(r->layer)][r->target], t, *r, base, file);
  }
  for (std::size_t l = 0; l < out.layers.size(); ++l)
    for (auto& [t, m] : out.layers[l]) {
      if (m.a.empty() || m.b.empty())
        throw input_error(file + ": layer " + std::to_string(l) + " " + lora_target_name(t) + ": has lora_" + (m.a.empty() ? "B" : "A") +
                          " without its lora_" + (m.a.empty() ? "A" : "B"));
      // The scale is alpha / r: a file whose matrices have another rank than its config says
      // would be served scaled wrong, silently.
      const bool attention = t == lora_target::q_proj || t == lora_target::k_proj || t == lora_target::v_proj || t == lora_target::o_proj;
      const std::string module = "model.layers." + std::to_string(l) + (attention ? ".self_attn." : ".mlp.") + lora_target_name(t);
      if (m.rank != c.rank_of(module))
        throw input_error(file + ": layer " + std::to_string(l) + " " + lora_target_name(t) + ": its matrices have rank " +
                          std::to_string(m.rank) + ", but adapter_config.json says r = " + std::to_string(c.rank_of(module)));
      m.scale = c.rslora ? c.alpha / std::sqrt(double(m.rank)) : c.alpha / double(m.rank);
      std::vector<float> scaled(m.a);
      for (auto& v : scaled) v = float(v * m.scale);
      m.scaled_a = kernels::pack_weight(scaled.data(), kernels::dtype::f32, std::size_t(m.rank), std::size_t(m.in));
      m.packed_b = kernels::pack_weight(m.b.data(), kernels::dtype::f32, std::size_t(m.out), std::size_t(m.rank));
    }
  if (out.num_matrices() == 0) throw input_error(file + ": holds no LoRA matrices");
  return out;
}

// Multiply-adds below which apply_lora stays on the calling thread (about 20 us of one core's
// f32 SIMD, the order of one fan-out over the kernel threads and back).
constexpr std::size_t lora_serial_work = std::size_t(1) << 20;

std::string lora_fingerprint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::uint8_t> bytes;
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"}) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) throw input_error(path + ": cannot be read (a PEFT adapter folder has " + name + ")");
    const std::string text = read_regular_file(path, max_weights_file_bytes, name);
    bytes.insert(bytes.end(), text.begin(), text.end());
    bytes.push_back(0);  // where one file ends, so that bytes moved between them change the hash
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(kv::siphash(bytes)));
  return hex;
}

std::string lora_identity(const std::string& name, const std::string& fingerprint) { return name + "@" + fingerprint; }

std::shared_ptr<const lora_adapter> shared_lora_adapter(const std::string& dir, const model_config& base) {
  // By the files' bytes and the base's shape (an adapter is checked against, and shaped for, its
  // base), not by path or name: two names for the same files share too.
  auto key_of = [&](const std::string& fingerprint) {
    return fingerprint + "/" + std::to_string(base.num_hidden_layers) + "x" + std::to_string(base.hidden_size) + "x" +
           std::to_string(base.intermediate_size) + "x" + std::to_string(base.q_dim()) + "x" + std::to_string(base.kv_dim());
  };
  const std::string key = key_of(lora_fingerprint(dir));
  static std::mutex m;
  static std::map<std::string, std::weak_ptr<const lora_adapter>> held;
  {
    std::lock_guard<std::mutex> l(m);
    for (auto it = held.begin(); it != held.end();) it = it->second.expired() ? held.erase(it) : std::next(it);
    if (auto it = held.find(key); it != held.end())
      if (auto a = it->second.lock()) return a;
  }
  auto a = std::make_shared<const lora_adapter>(read_lora_adapter(dir, base));  // outside the lock: files take time
  const std::string read_key = key_of(a->fingerprint);  // the files as read (they may have changed since)
  std::lock_guard<std::mutex> l(m);
  if (auto it = held.find(read_key); it != held.end())
    if (auto other = it->second.lock()) return other;  // another replica read it meanwhile
  held[read_key] = a;
  return a;
}

void apply_lora(const lora_matrix& m, const float* x, std::size_t rows, float* out, std::size_t out_stride,
                std::vector<float>& scratch) {
  if (!m.scaled_a.data || !m.packed_b.data) throw std::logic_error("apply_lora: the adapter's matrices are not packed");
  if (out_stride == 0) out_stride = std::size_t(m.out);
  const std::size_t rank = std::size_t(m.rank), n = std::size_t(m.out);
  scratch.resize(rows * (rank + n));
  float* ax = scratch.data();
  float* bax = ax + rows * rank;
  // A few decode rows are a few microseconds of arithmetic, less than handing them to the kernel
  // threads and waiting for them costs; a prefill chunk's rows are worth spreading.
  std::optional<kernels::on_this_thread> serial;
  if (rows * (std::size_t(m.in) + n) * rank < lora_serial_work) serial.emplace();
  kernels::linear(x, rows, m.scaled_a, nullptr, ax);   // scale * A x, rows x rank
  kernels::linear(ax, rows, m.packed_b, nullptr, bax);  // B (scale * A x), rows x out
  for (std::size_t r = 0; r < rows; ++r) {
    float* o = out + r * out_stride;
    const float* d = bax + r * n;
    for (std::size_t j = 0; j < n; ++j) o[j] += d[j];
  }
}

void apply_lora(const lora_matrix& m, const float* x, std::size_t rows, float* out, std::size_t out_stride) {
  std::vector<float> scratch;
  apply_lora(m, x, rows, out, out_stride, scratch);
}

void merge_lora(const lora_matrix& m, float* w) {
  for (int j = 0; j < m.out; ++j)
    for (int k = 0; k < m.rank; ++k) {
      const float bk = float(m.scale) * m.b[std::size_t(j) * std::size_t(m.rank) + std::size_t(k)];
      const float* ak = &m.a[std::size_t(k) * std::size_t(m.in)];
      float* wj = w + std::size_t(j) * std::size_t(m.in);
      for (int i = 0; i < m.in; ++i) wj[i] += bk * ak[i];
    }
}

}  // namespace troupe::model
