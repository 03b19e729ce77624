#include "runtime/model/config_keys.h"

#include <climits>
#include <cmath>

#include "runtime/common/error.h"
#include "runtime/model/gguf.h"

namespace troupe::model {

using nlohmann::json;

namespace {

[[noreturn]] void key_wrong_type(const std::string& source, const std::string& key, const json& v) {
  throw input_error(source + ": key '" + key + "' has the wrong type (" + v.dump() + ")");
}

}  // namespace

int json_int(const json& v, const std::string& key, const std::string& source) {
  if (!v.is_number_integer()) key_wrong_type(source, key, v);
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > std::uint64_t(INT_MAX)
                             : (v.get<std::int64_t>() > INT_MAX || v.get<std::int64_t>() < INT_MIN))
    throw input_error(source + ": key '" + key + "' is " + v.dump() + ", beyond what this runtime supports (" +
                      std::to_string(INT_MAX) + ")");
  return int(v.get<std::int64_t>());
}

bool hf_keys::has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

int hf_keys::need_int(const std::string& key) const {
  if (!j_.contains(key)) throw input_error(source_ + ": missing key '" + key + "'");
  return json_int(j_.at(key), key, source_);
}

int hf_keys::int_or(const std::string& key, int fallback) const { return has(key) ? need_int(key) : fallback; }

double hf_keys::real_or(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_number()) key_wrong_type(source_, key, v);
  return v.get<double>();
}

bool hf_keys::bool_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_boolean()) key_wrong_type(source_, key, v);
  return v.get<bool>();
}

std::string hf_keys::text_or(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_string()) key_wrong_type(source_, key, v);
  return v.get<std::string>();
}

std::vector<int> hf_keys::ints_or(const std::string& key, std::vector<int> fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_array()) key_wrong_type(source_, key, v);
  std::vector<int> out;
  for (auto& x : v) out.push_back(json_int(x, key, source_));
  return out;
}

std::vector<double> hf_keys::reals(const std::string& key) const {
  if (!has(key)) throw input_error(source_ + ": missing key '" + key + "'");
  const json& v = j_.at(key);
  if (!v.is_array()) key_wrong_type(source_, key, v);
  std::vector<double> out;
  for (auto& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) key_wrong_type(source_, key, v);
    out.push_back(x.get<double>());
  }
  return out;
}

const std::string& gguf_keys::path() const { return g_.path(); }

bool gguf_keys::has(const std::string& suffix) const { return g_.metadata().contains(key(suffix)); }

int gguf_keys::need_int(const std::string& suffix, std::int64_t least) const {
  const std::string k = key(suffix);
  auto it = g_.metadata().find(k);
  if (it == g_.metadata().end()) throw input_error(path() + ": metadata '" + k + "' is missing");
  if (!it->is_number_integer() || it->get<std::int64_t>() < least || it->get<std::int64_t>() > (std::int64_t(1) << 30))
    throw input_error(path() + ": metadata '" + k + "' must be an integer of at least " + std::to_string(least) + ", not " + it->dump());
  return int(it->get<std::int64_t>());
}

int gguf_keys::int_or(const std::string& suffix, int fallback, std::int64_t least) const {
  return has(suffix) ? need_int(suffix, least) : fallback;
}

double gguf_keys::real_or(const std::string& suffix, double fallback) const {
  const std::string k = key(suffix);
  auto it = g_.metadata().find(k);
  if (it == g_.metadata().end()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    throw input_error(path() + ": metadata '" + k + "' must be a finite number, not " + it->dump());
  return it->get<double>();
}

std::optional<std::string> gguf_keys::text(const std::string& suffix) const {
  const std::string k = key(suffix);
  auto it = g_.metadata().find(k);
  if (it == g_.metadata().end()) return std::nullopt;
  if (!it->is_string()) throw input_error(path() + ": metadata '" + k + "' must be a string, not " + it->dump());
  return it->get<std::string>();
}

std::optional<std::vector<double>> gguf_keys::divisors(const std::string& tensor) const {
  const auto& t = g_.tensors();
  auto f = t.find(tensor);
  if (f == t.end()) return std::nullopt;
  if (f->second.type != ggml_type::f32 || f->second.shape.size() != 1)
    throw input_error(path() + ": tensor '" + tensor + "' must be one row of F32 (a divisor per RoPE frequency)");
  const auto* v = reinterpret_cast<const float*>(f->second.data);
  return std::vector<double>(v, v + f->second.shape[0]);
}

}  // namespace troupe::model
