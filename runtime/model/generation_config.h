// A model folder's generation_config.json: the end-of-sequence ids the model was trained to
// stop at (often more than config.json names) and its recommended sampling, which serves as
// the default of each sampling field a request leaves out (as vLLM does).
#pragma once
#include <string>
#include <vector>

#include "runtime/sampling/sampling_params.h"

namespace troupe::model {

struct generation_config {
  std::vector<int> eos_token_ids;
  sampling::sampling_params defaults;  // temperature, top_p, top_k, min_p, repetition_penalty
};

// Reads `dir`/generation_config.json; a folder without one gives no ids and the plain defaults.
// Throws input_error naming the file and key for a value of the wrong type or out of range.
generation_config load_generation_config(const std::string& dir);

}  // namespace troupe::model
