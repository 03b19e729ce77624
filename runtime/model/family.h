// A model family: everything that makes it differ from the others, in one unit of its own
// (runtime/model/families/NAME.cpp), as llama.cpp keeps one file per architecture. A family says
// which config.json architectures and which GGUF general.architecture it reads, the keys of its
// own that each holds, and its per-layer tensors' names in both formats. What it reads sets the
// recipe fields of model_config (attention biases, query/key norms, experts, ...), and the one
// forward composes its shared blocks from those; the engine, scheduler, KV cache, speculation,
// LoRA, quantization and parallelism never ask which family a model is.
//
// Adding a family: write families/NAME.cpp defining `const family& NAME_family()`, and list it
// in families/registry.cpp. Keys every family shares (sizes, heads, RoPE base and scaling, norm
// epsilon, BOS/EOS) are read before the family's own reader runs, so it reads only what is its.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_config.h"

namespace troupe::model {

class gguf_file;

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

 private:
  const gguf_file& g_;
  std::string arch_;
};

struct family {
  std::string name;                           // synth's --arch and config.json's model_type
  std::vector<std::string> hf_architectures;  // config.json's "architectures"; the first is written
  // general.architecture; empty: the family has no GGUF layout here. Several families may write
  // one (Mistral's files say llama): reading such a file gives the first registered.
  std::string gguf_architecture;
  // Per-layer tensors: GGUF's part of the name (between "blk.N." and ".weight"/".bias") and
  // Hugging Face's (between "model.layers.N." and ".weight"/".bias").
  std::vector<std::pair<std::string, std::string>> layer_tensors;
  // llama.cpp's converter stores each head's query and key rows with the two halves of a rotary
  // pair adjacent (its "normal" RoPE); the loader puts them back in Hugging Face's order.
  bool gguf_interleaves_rope = false;
  // The family's own keys, read after the shared ones (may be empty).
  std::function<void(const hf_keys&, model_config&)> read_hf;
  std::function<void(const gguf_keys&, model_config&)> read_gguf;
  // The family's own config.json keys for `c` (what the synthesizer writes; may be empty).
  std::function<void(const model_config&, nlohmann::json&)> write_hf;
  // The family's own GGUF keys for `c`, as {suffix after "ARCH.": number} (what GGUF export
  // writes beyond the shared ones: integers as u32, others as f32; may be empty).
  std::function<nlohmann::json(const model_config&)> write_gguf;
  // A synthesized model's recipe beyond the preset's sizes (window, caps; may be empty).
  std::function<void(model_config&)> synth;
};

// Every family, in the registry's order.
const std::vector<const family*>& families();
// The family of a config.json architecture or a GGUF general.architecture; nullptr if none.
const family* family_of_hf(const std::string& architecture);
const family* family_of_gguf(const std::string& architecture);
const family* family_named(const std::string& name);
// What the registry reads, for error messages: "LlamaForCausalLM, Qwen2ForCausalLM, ...".
std::string known_hf_architectures();
std::string known_gguf_architectures();

// The per-layer tensors every dense decoder in Llama's mould has (norms, attention, SwiGLU MLP):
// what most families' layer_tensors start from.
std::vector<std::pair<std::string, std::string>> decoder_layer_tensors();

}  // namespace troupe::model
