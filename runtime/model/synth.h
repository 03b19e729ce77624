// Writes Hugging Face model folders with deterministic random weights: for tests, benchmarks
// and the default demo, so nothing is ever downloaded.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cpu/dtype.h"
#include "runtime/model/model_config.h"

namespace troupe::model {

struct synth_options {
  std::string preset = "small";  // tiny | small | 1b | moe
  std::string arch = "llama";    // a family's name (family.h): llama, mistral, qwen2, qwen3, mixtral, ...
  kernels::dtype type = kernels::dtype::f32;
  std::uint64_t seed = 0;
  bool tied_embeddings = false;
  bool llama3_rope_scaling = false;
  std::string rope_scaling;  // or "linear" (factor 2), "yarn" (factor 4 over an original 256 positions), "dynamic" (factor 2)
  int layers = 0;    // 0: the preset's
  int head_dim = 0;  // each attention head's size; 0: hidden / heads (Qwen3 and Nemo give theirs apart)
  // Qwen2-MoE: layer 0 dense (mlp_only_layers), as the family allows; false: experts in every
  // layer, as llama.cpp's files hold them.
  bool moe_dense_layer = true;
  double partial_rotary = 0.0;  // the share of each head RoPE rotates (Phi-4-mini: 0.75); 0: all
  int vocab_size = 0;           // 0: the preset's (a real family's, to put its tokenizer.json beside the weights)
  bool tokenizer = true;        // false: no tokenizer files (the caller puts a real family's beside the weights)
  int sliding_window = 0;       // the windowed layers' window (Gemma 3 1B: 512); 0: the family's synthesized one
  std::string out;  // folder to create or overwrite
};

// The architecture of a preset; throws input_error for an unknown preset or arch.
model_config synth_config(const synth_options& opts);

// Called as bytes of weights are written: (written, total).
using progress_fn = std::function<void(std::size_t, std::size_t)>;

// Writes config.json, model.safetensors, tokenizer.json and tokenizer_config.json into
// opts.out. The same options give the same bytes. Throws input_error if the folder cannot be
// written.
void synthesize(const synth_options& opts, const progress_fn& progress = {});

// A LoRA adapter in PEFT's folder layout for a base shaped `base`: rank `rank` (lora_alpha twice
// that) on every projection of every layer, each matrix uniform in +-0.1 drawn from its own seed
// (`seed`, then one more per matrix), written to `out` (adapter_config.json and
// adapter_model.safetensors). For the docs' examples and the tests; it adapts nothing learnt.
void synthesize_lora(const model_config& base, const std::string& out, int rank = 4, std::uint32_t seed = 11);

}  // namespace troupe::model
