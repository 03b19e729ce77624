// The quality gate: a model's perplexity on a text, teacher-forced. The text's tokens are cut
// into consecutive windows of `window` tokens (the model's context by default); within a window
// every token after the first is scored by the log-probability the model gives it after the
// window's earlier tokens, so a score never sees past its window. The figure is exp of the mean
// negative log-likelihood over every scored token. A window runs as chunks of at most `chunk`
// tokens (attending to the window's KV so far), which bounds the logits held at once.
//
// Used by `troupe eval perplexity`, by the test that the default model keeps its recorded figure,
// and to price quantized weights (issue 13).
#pragma once
#include <cstdint>
#include <span>

#include "runtime/model/llama_model.h"

namespace troupe::eval {

struct perplexity_config {
  int window = 0;   // tokens per window; 0: the model's max_position_embeddings
  int chunk = 256;  // tokens per forward
  kernels::dtype kv_type = kernels::dtype::f32;  // the KV cache's element type (int8 prices its quantization)
};

struct perplexity_result {
  std::size_t tokens = 0;  // scored tokens
  std::size_t windows = 0;
  int window = 0;          // the window used
  double nll = 0;          // summed negative log-likelihood, nats
  double seconds = 0;
  double mean_nll() const { return tokens ? nll / double(tokens) : 0; }
  double perplexity() const;
};

// Throws input_error when fewer than two tokens are given, or the window is below 2 or beyond
// the model's context, or a token is outside the vocabulary (naming its position).
perplexity_result perplexity(const model::llama_model& m, std::span<const std::int32_t> tokens, perplexity_config cfg = {});

// log softmax(logits)[target], in double.
double log_probability(std::span<const float> logits, std::int32_t target);

}  // namespace troupe::eval
