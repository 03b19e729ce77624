#include "runtime/sampling/sample_rows.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>

#include "kernels/cpu/thread_pool.h"

namespace troupe::sampling {

namespace {

// Tokens outside the mask get -inf, which no penalty or bias (finite) brings back. A word at a
// time: a mask is mostly whole words of allowed or of refused tokens, and a test per token was a
// tenth of a constrained step on a small model.
void apply_allowed(std::span<float> logits, const std::vector<std::uint64_t>& allowed) {
  constexpr float refused = -std::numeric_limits<float>::infinity();
  for (std::size_t base = 0, w = 0; base < logits.size(); base += 64, ++w) {
    const std::uint64_t bits = w < allowed.size() ? allowed[w] : 0;
    if (bits == ~std::uint64_t(0)) continue;
    const std::size_t n = std::min<std::size_t>(64, logits.size() - base);
    if (bits == 0) {
      std::fill_n(logits.begin() + std::ptrdiff_t(base), n, refused);
      continue;
    }
    for (std::size_t j = 0; j < n; ++j)
      if (!((bits >> j) & 1)) logits[base + j] = refused;
  }
}

// The greedy choice among the allowed tokens: the first of the highest, as choose_token picks
// over the masked row, but read in place (no copy of the row) and over the allowed ids only.
std::int32_t greedy_allowed(std::span<const float> logits, const std::vector<std::uint64_t>& allowed) {
  std::int32_t best = -1;
  float top = 0;
  for (std::size_t w = 0; w < allowed.size() && w * 64 < logits.size(); ++w)
    for (std::uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const std::size_t id = w * 64 + std::size_t(std::countr_zero(bits));
      if (id >= logits.size()) break;
      if (best < 0 || logits[id] > top) {
        best = std::int32_t(id);
        top = logits[id];
      }
    }
  return best < 0 ? 0 : best;  // nothing allowed: token 0, as the masked row's argmax
}

}  // namespace

std::vector<sampled_token> sample_rows(std::span<const float> logits, std::span<const sampling_row> rows, int vocab,
                                       std::span<const std::int32_t> eos_ids) {
  const std::size_t v = std::size_t(vocab);
  if (logits.size() != rows.size() * v)
    throw std::logic_error("sample_rows: " + std::to_string(logits.size()) + " logits for " + std::to_string(rows.size()) +
                           " rows of " + std::to_string(vocab));
  std::vector<sampled_token> out(rows.size());
  // Rows are independent: a vocabulary-wide pass per row is most of a step's time outside the
  // forward at batch 64, so they are spread over the threads.
  kernels::parallel_for(rows.size(), [&](std::size_t i) {
    const sampling_row& r = rows[i];
    std::span<const float> row = logits.subspan(i * v, v);
    if (r.score >= 0) {
      out[i].token = r.score;
      out[i].logprobs = logprobs_of(row, r.score, std::max(0, r.params.prompt_logprobs));
      out[i].logprobs.rank = rank_of(row, r.score);
      return;
    }
    const auto& p = r.params;
    const bool penalties = needs_history(p);
    const bool processors = p.processes_logits(r.num_output);
    const bool masked = !r.allowed.empty();
    if (masked && p.greedy() && !penalties && !processors) {  // a constrained greedy step: most of them
      out[i].token = greedy_allowed(row, r.allowed);
      if (p.logprobs >= 0) out[i].logprobs = logprobs_of(row, out[i].token, p.logprobs);
      return;
    }
    std::vector<float> scratch;
    std::span<const float> use = row;
    if (penalties || processors || masked) {
      scratch.assign(row.begin(), row.end());
      if (masked) apply_allowed(scratch, r.allowed);
      if (penalties) {
        const std::size_t pl = std::min<std::size_t>(std::size_t(r.prompt_len), r.history.size());
        apply_penalties(scratch, p, std::span(r.history.data(), pl), std::span(r.history.data() + pl, r.history.size() - pl));
      }
      if (processors) apply_logit_processors(scratch, p, r.num_output, eos_ids);
      use = scratch;
    }
    out[i].token = choose_token(use, p, r.seed, r.num_output);
    if (p.logprobs >= 0) out[i].logprobs = logprobs_of(row, out[i].token, p.logprobs);
  });
  return out;
}

std::int32_t sim_token(const sampling_row& row, int vocab, std::span<const std::int32_t> eos_ids) {
  const double u = position_uniform(row.seed, row.num_output);
  std::int32_t t = std::int32_t(u * vocab);
  while (std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end()) t = (t + 1) % vocab;
  return t;
}

}  // namespace troupe::sampling
