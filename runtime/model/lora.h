// A LoRA adapter in Hugging Face PEFT's folder layout (adapter_config.json beside
// adapter_model.safetensors), read and checked against the base model it adapts. An adapted
// projection computes W x + scale * B (A x): A is rank x in, B is out x rank, and scale is
// lora_alpha / rank (lora_alpha / sqrt(rank) with use_rslora; rank_pattern's per-module ranks
// come from the tensors' shapes). The adapter is kept apart from the base weights so requests for
// several adapters and for the base can share one batch: `apply_lora` adds one request's share.
//
// What the reader refuses, by name, rather than serve something else: DoRA (use_dora), adapter
// biases (bias other than "none"), modules_to_save, fan_in_fan_out (GPT-2's layout),
// alpha_pattern, a peft_type other than LORA, adapted embeddings, LM head or experts, a tensor
// without its partner, and shapes the base model does not have. Keys that change nothing at
// inference are accepted: lora_dropout, inference_mode, init_lora_weights, task_type, revision,
// base_model_name_or_path (kept, shown), target_modules and layers_to_transform (the tensors
// present are what is adapted).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/packed_weight.h"
#include "runtime/model/model_config.h"

namespace troupe::model {

// The projections an adapter may adapt, with PEFT's names.
enum class lora_target : std::uint8_t { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
const char* lora_target_name(lora_target t);

// One adapted projection of one layer.
struct lora_matrix {
  int in = 0, out = 0, rank = 0;
  double scale = 0;      // lora_alpha / rank (or / sqrt(rank))
  std::vector<float> a;  // rank x in, row-major
  std::vector<float> b;  // out x rank, row-major
  // The same for the matmul kernels (read_lora_adapter packs them): scale * A, and B.
  kernels::packed_weight scaled_a, packed_b;
};

struct lora_adapter {
  std::string dir;
  std::string base_model;  // base_model_name_or_path, as the file says (shown, not checked)
  std::string fingerprint;  // of the folder's two files (lora_fingerprint)
  int rank = 0;            // r in the config
  double alpha = 0;        // lora_alpha
  bool rslora = false;
  // layers[l]: the layer's adapted projections.
  std::vector<std::map<lora_target, lora_matrix>> layers;

  std::size_t num_matrices() const;
  std::size_t bytes() const;  // of the f32 matrices held
};

// Reads `dir` for a model of `base`'s shape. Throws input_error naming the file and the key or
// tensor that is wrong.
lora_adapter read_lora_adapter(const std::string& dir, const model_config& base);

// read_lora_adapter, once per process for the same files and base shape: replicas in one process
// share the matrices (they are never written after the read). Kept while any holder lives; the
// next call after the last one let go reads the files again.
std::shared_ptr<const lora_adapter> shared_lora_adapter(const std::string& dir, const model_config& base);

// 16 hex digits naming the bytes of `dir`'s adapter_config.json and adapter_model.safetensors:
// two reads of the same files agree, and a changed file gives another. Throws input_error naming
// a file that cannot be read.
std::string lora_fingerprint(const std::string& dir);

// What requests, engines and the prefix cache's keys call one adapter's weights:
// "NAME@FINGERPRINT". Reloading a name with other files gives another identity, so KV computed
// with the old weights is never found for the new ones.
std::string lora_identity(const std::string& name, const std::string& fingerprint);

// out[r] += m.scale * B (A x[r]) for each of `rows` rows of x (m.in wide). Rows of out are
// `out_stride` apart (0: m.out), so a fused projection's slice (q in qkv, up in gate_up) takes it.
// Two small matmuls on the kernels' threads (the packed matrices), through `scratch` (resized to
// rows x (rank + out); a forward's workspace keeps it between calls).
void apply_lora(const lora_matrix& m, const float* x, std::size_t rows, float* out, std::size_t out_stride,
                std::vector<float>& scratch);
void apply_lora(const lora_matrix& m, const float* x, std::size_t rows, float* out, std::size_t out_stride = 0);

// w (m.out x m.in, row-major) += m.scale * B A: the adapter merged into a base weight.
void merge_lora(const lora_matrix& m, float* w);

}  // namespace troupe::model
