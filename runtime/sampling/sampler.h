// Chooses the next token from logits. The random draw for an output position depends only on
// (request seed, position), so a request gives the same tokens in any batch, after recompute,
// and on any worker it migrates to.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampling_params.h"

namespace troupe::sampling {

// The uniform draw in [0, 1) for one output position of a request.
double position_uniform(std::uint64_t seed, std::int64_t position);

// Applies penalties in place: repetition over `prompt` and `output`, presence and frequency
// over `output`.
void apply_penalties(std::span<float> logits, const sampling_params& p, std::span<const std::int32_t> prompt,
                     std::span<const std::int32_t> output);

// Applies logit_bias, and while fewer than min_tokens are out (`num_output`), bans `eos_ids`
// (unless ignore_eos) and stop_token_ids. Ids outside the vocabulary are ignored (the API
// refuses them before they get here).
void apply_logit_processors(std::span<float> logits, const sampling_params& p, int num_output,
                            std::span<const std::int32_t> eos_ids);

// Picks a token for output position `position` from (already penalised) logits: argmax for
// greedy (lowest id on ties), else temperature, top-k, top-p and min-p, then one draw.
std::int32_t choose_token(std::span<const float> logits, const sampling_params& p, std::uint64_t seed,
                          std::int64_t position);

// Log-probabilities of one position under the model's raw distribution (log-softmax of the
// logits before penalties and temperature, as vLLM reports them): the chosen token's, and the
// `top` most likely tokens in descending order (lowest id first on ties).
struct token_logprobs {
  float logprob = 0;
  std::int32_t rank = 0;  // scored prompt tokens: 1 + how many tokens are more likely (else 0)
  std::vector<std::int32_t> top_ids;
  std::vector<float> top_logprobs;
};
token_logprobs logprobs_of(std::span<const float> logits, std::int32_t chosen, int top);
// 1 + how many tokens have a higher logit than `token`.
std::int32_t rank_of(std::span<const float> logits, std::int32_t token);

}  // namespace troupe::sampling
