// Exact acceptance: how a sequence's proposed tokens are checked against the target model so
// that speculation never changes the output. Pure.
//
// A verify step gives a sequence k+1 logit rows: its last accepted token and its k proposed
// tokens go in, and row j holds the target's logits for output position num_output + j, had
// proposed[0..j) been generated. The sampler chooses each row's token from (seed, position) and
// the row's own history (runtime/sampling/sample_rows.h), so row j's choice is exactly the token
// a one-token decode step at that position would choose, given the same logits.
//
// Contract: a proposed token is accepted iff it equals the token the target chose at its row;
// the first mismatch takes the target's token and ends the step; if all k are accepted, the
// row after them adds one more. So a step yields between 1 and k+1 tokens, each the target's
// own choice, and the output is the one speculation off gives, token for token (greedy and
// seeded). What ends a sequence (EOS, stop ids and strings, max_tokens) is judged token by token
// by the output processing afterwards, which drops whatever follows the end.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sample_rows.h"

namespace troupe::speculative {

// The k+1 sampling rows of a verify step, from the row a one-token decode step would use.
std::vector<sampling::sampling_row> verify_rows(const sampling::sampling_row& decode_row, std::span<const std::int32_t> proposed);
// The last of them alone: the row at position num_output + proposed.size() (what a draft samples
// its next proposal with).
sampling::sampling_row row_after(const sampling::sampling_row& decode_row, std::span<const std::int32_t> proposed);

struct verdict {
  std::vector<sampling::sampled_token> tokens;  // the step's output, 1 to k+1 tokens
  int accepted = 0;                             // proposed tokens kept (tokens.size() - 1)
};

// `chosen`: the target's token at each verify row, proposed.size() + 1 of them.
verdict judge(std::span<const std::int32_t> proposed, std::span<const sampling::sampled_token> chosen);

}  // namespace troupe::speculative
