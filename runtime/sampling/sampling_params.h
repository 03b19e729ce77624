// How a request wants its tokens chosen and when it wants generation to stop.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::sampling {

struct sampling_params {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // over prompt and output tokens; 1: off
  float presence_penalty = 0.0f;    // over output tokens
  float frequency_penalty = 0.0f;   // over output tokens
  std::optional<std::uint64_t> seed;  // unset: the engine draws one at admission
  int max_tokens = 16;
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings; the output text ends before them
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob and the N most likely

  static constexpr int max_logprobs = 20;

  bool greedy() const { return temperature == 0.0f; }
  // Throws input_error naming the field and its allowed range.
  void validate() const;
};

}  // namespace troupe::sampling
