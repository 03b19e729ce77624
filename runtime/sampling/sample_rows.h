// Choosing a step's tokens where its logits are: the rank that computed them samples and sends
// back token ids (and the logprobs a request asked for), so vocabulary-sized rows never cross an
// actor boundary. This is the one place a token is chosen.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampler.h"

namespace troupe::sampling {

// What choosing one row's token needs from its request.
struct sampling_row {
  sampling_params params;
  std::uint64_t seed = 0;
  std::int32_t num_output = 0;        // tokens out before this one: the draw's position
  std::int32_t prompt_len = 0;        // the first prompt_len of `history` are the prompt
  std::vector<std::int32_t> history;  // prompt + output; sent only when penalties need it
  // Structured output: bit id set for each token the constraint allows here (EOS included where
  // the output is complete); empty: every token. Applied first, before penalties and logit_bias.
  std::vector<std::uint64_t> allowed;
  // >= 0: nothing is sampled: this token (the prompt's next one) is scored, with the top
  // params.prompt_logprobs, on the raw logits (prompt logprobs).
  std::int32_t score = -1;
};

struct sampled_token {
  std::int32_t token = -1;
  token_logprobs logprobs;  // filled when params.logprobs >= 0
};

// Whether choosing a token for `p` reads the request's earlier tokens.
inline bool needs_history(const sampling_params& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// One token per row of `logits` ([rows.size()][vocab]), rows spread over the CPU threads.
std::vector<sampled_token> sample_rows(std::span<const float> logits, std::span<const sampling_row> rows, int vocab,
                                       std::span<const std::int32_t> eos_ids);

// The sim backend's token for a row: a hash of (seed, position), never an EOS id.
std::int32_t sim_token(const sampling_row& row, int vocab, std::span<const std::int32_t> eos_ids);

}  // namespace troupe::sampling
