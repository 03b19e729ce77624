#include "runtime/model/fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "runtime/common/splitmix.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/model_source.h"
#include "runtime/model/config_json.h"

namespace troupe::model {

namespace {

// Two 64-bit lanes of FNV-1a with different offsets, finished with splitmix64: a 128-bit
// digest for telling models apart (not a defence against forgery; the cluster token is).
struct digest {
  std::uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      a = (a ^ c[i]) * 0x100000001b3ull;
      b = (b ^ c[i]) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
    }
  }
  void add(const std::string& s) {
    add(s.data(), s.size());
    add("\0", 1);
  }
  std::string hex() const {
    char out[40];
    std::snprintf(out, sizeof out, "%016llx%016llx", (unsigned long long)splitmix64(a), (unsigned long long)splitmix64(b));
    return out;
  }
};

}  // namespace

std::string shape_fingerprint(const model_config& c) {
  digest d;
  d.add(to_config_json(c));
  return d.hex();
}

std::string model_fingerprint(const std::string& dir) {
  digest d;
  d.add(to_config_json(load_model_config(dir)));
  std::map<std::string, std::string> tensors;  // by name, whatever file holds them
  auto add = [&](const std::string& name, std::string entry, const std::vector<std::int64_t>& shape, const std::uint8_t* data,
                 std::size_t bytes) {
    for (auto x : shape) entry += "," + std::to_string(x);
    entry.append(reinterpret_cast<const char*>(data), std::min<std::size_t>(bytes, 64));
    tensors[name] = std::move(entry);
  };
  if (is_gguf_path(dir)) {
    gguf_file g(dir);
    for (auto& [name, t] : g.tensors()) add(name, ggml_type_name(std::uint32_t(t.type)), t.shape, t.data, t.bytes);
  } else {
    for (const auto& f : model_safetensors_files(dir)) {
      safetensors_file s(f);
      for (auto& [name, t] : s.tensors()) add(name, t.dtype_name, t.shape, t.data, t.bytes);
    }
  }
  for (auto& [name, entry] : tensors) {
    d.add(name);
    d.add(entry);
  }
  return d.hex();
}

}  // namespace troupe::model
