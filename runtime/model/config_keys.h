// A model's configuration keys as the families read them: config.json's (hf_keys) and a GGUF
// file's under its architecture's prefix (gguf_keys), each wrong one refused naming the file and
// the key. Apart from family.h so that RoPE's and the config's readers use them without the
// registry.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::model {

class gguf_file;

// An int from JSON, refused (not truncated) when it is not an integer or past 32 bits; errors
// name `source` and `key`.
int json_int(const nlohmann::json& v, const std::string& key, const std::string& source);

// config.json's keys, each refused naming the file and the key when of the wrong type.
class hf_keys {
 public:
  hf_keys(const nlohmann::json& j, std::string source) : j_(j), source_(std::move(source)) {}
  const std::string& source() const { return source_; }
  const nlohmann::json& object() const { return j_; }
  bool has(const std::string& key) const;  // present and not null
  int need_int(const std::string& key) const;
  int int_or(const std::string& key, int fallback) const;
  double real_or(const std::string& key, double fallback) const;
  bool bool_or(const std::string& key, bool fallback) const;
  std::string text_or(const std::string& key, const std::string& fallback) const;
  std::vector<int> ints_or(const std::string& key, std::vector<int> fallback) const;
  std::vector<double> reals(const std::string& key) const;  // a required list of numbers

 private:
  const nlohmann::json& j_;
  std::string source_;
};

// A GGUF file's keys of one architecture: need_int("attention.key_length") reads
// "<architecture>.attention.key_length". Errors name the file and the whole key.
class gguf_keys {
 public:
  gguf_keys(const gguf_file& g, std::string architecture) : g_(g), arch_(std::move(architecture)) {}
  const gguf_file& file() const { return g_; }
  const std::string& path() const;
  const std::string& architecture() const { return arch_; }
  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }
  bool has(const std::string& suffix) const;
  int need_int(const std::string& suffix, std::int64_t least = 1) const;
  int int_or(const std::string& suffix, int fallback, std::int64_t least = 1) const;
  double real_or(const std::string& suffix, double fallback) const;
  std::optional<std::string> text(const std::string& suffix) const;
  // A tensor of one F32 row holding a divisor per RoPE frequency (rope_freqs, rope_factors_long,
  // rope_factors_short), or nothing when the file has none by that name.
  std::optional<std::vector<double>> divisors(const std::string& tensor) const;

 private:
  const gguf_file& g_;
  std::string arch_;
};

}  // namespace troupe::model
