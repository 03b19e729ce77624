// Writes a quantized copy of a model folder (troupe model quantize; layout in
// docs/quantization.md): the attention and MLP projections become q8_0/q4_0 blocks,
// per-channel int8, or the formats of one of llama.cpp's mixes (q4_k_m: Q4_K with some layers'
// v_proj and down_proj in Q6_K, ...); everything else (embeddings, norms, LM head, tokenizer)
// is copied as is.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "kernels/cpu/quant.h"

namespace troupe::model {

struct quantize_options {
  std::string in, out;  // model folders; `out` is created (it must not hold a model already)
  kernels::quant_type type = kernels::quant_type::q8_0;
  // A mix (model/gguf_mix.h: q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k, iq4_xs) instead of `type`: each
  // projection in the format llama.cpp's rule gives it, named in the file's metadata.
  std::string mix;
};

struct quantize_report {
  std::size_t tensors_quantized = 0, tensors_copied = 0;
  std::size_t bytes_in = 0, bytes_out = 0;  // tensor data read and written
};

// Throws input_error naming what was wrong: a GGUF file or a folder that is not a model, an
// already quantized or mixture-of-experts model, a projection whose input features are not a
// multiple of 32. `progress` gets (tensors written, tensors in the model).
quantize_report quantize_model(const quantize_options& o, const std::function<void(std::size_t, std::size_t)>& progress = {});

// Whether a tensor name is a projection the quantized formats cover.
bool is_quantized_projection(const std::string& tensor_name);

}  // namespace troupe::model
