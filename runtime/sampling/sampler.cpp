#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "runtime/common/error.h"
#include "runtime/common/splitmix.h"

namespace troupe::sampling {

std::optional<sampling_params::violation> sampling_params::check(bool max_tokens_set) const {
  using v = violation;
  if (!(temperature >= 0.0f && temperature <= 100.0f)) return v{"temperature", "must be in [0, 100]"};
  if (top_k < 0) return v{"top_k", "must be >= 0 (0 disables it)"};
  if (!(top_p > 0.0f && top_p <= 1.0f)) return v{"top_p", "must be in (0, 1]"};
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return v{"min_p", "must be in [0, 1]"};
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) return v{"repetition_penalty", "must be > 0"};
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return v{"presence_penalty", "must be in [-2, 2]"};
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return v{"frequency_penalty", "must be in [-2, 2]"};
  if (max_tokens < 1) return v{"max_tokens", "must be >= 1"};
  if (logprobs < -1 || logprobs > max_logprobs) return v{"logprobs", "must be in [0, " + std::to_string(max_logprobs) + "]"};
  if (prompt_logprobs < -1 || prompt_logprobs > max_logprobs)
    return v{"prompt_logprobs", "must be in [0, " + std::to_string(max_logprobs) + "]"};
  for (auto& s : stop)
    if (s.empty()) return v{"stop", "stop strings must not be empty"};
  for (auto& [id, b] : logit_bias)
    if (!(b >= -100.0f && b <= 100.0f)) return v{"logit_bias", "biases must be in [-100, 100]"};
  if (min_tokens < 0) return v{"min_tokens", "must be >= 0"};
  if (max_tokens_set && min_tokens > max_tokens) return v{"min_tokens", "must not exceed max_tokens"};
  // With a constraint, EOS is the grammar's: the output ends where it is complete.
  if (ignore_eos && !constraint.empty()) return v{"ignore_eos", "cannot be combined with structured output"};
  return std::nullopt;
}

void sampling_params::validate() const {
  if (auto v = check()) throw input_error("invalid sampling parameter '" + v->field + "': " + v->rule);
}

namespace {

std::uint64_t mix(std::uint64_t x) { return splitmix64(x); }

struct candidate {
  double prob;
  std::int32_t id;
};

// Higher probability first; equal probabilities by id, so the order is total and stable.
bool before(const candidate& a, const candidate& b) { return a.prob > b.prob || (a.prob == b.prob && a.id < b.id); }

// Sorts the best candidates to the front until they hold `mass` of the probability (or `k`
// of them when k > 0), without sorting the whole vocabulary. Returns how many are sorted.
std::size_t sort_head(std::vector<candidate>& c, double mass, std::size_t k) {
  std::size_t sorted = 0;
  double cum = 0;
  std::size_t chunk = 64;
  while (sorted < c.size()) {
    std::size_t end = std::min(c.size(), sorted + chunk);
    if (k > 0) end = std::min(end, k);
    std::nth_element(c.begin() + long(sorted), c.begin() + long(end) - 1, c.end(), before);
    std::sort(c.begin() + long(sorted), c.begin() + long(end), before);
    for (std::size_t i = sorted; i < end; ++i) cum += c[i].prob;
    sorted = end;
    if ((k > 0 && sorted >= k) || cum >= mass) break;
    chunk *= 4;
  }
  return sorted;
}

}  // namespace

double position_uniform(std::uint64_t seed, std::int64_t position) {
  std::uint64_t h = mix(seed ^ mix(std::uint64_t(position) + 0x5851f42d4c957f2dull));
  return double(h >> 11) * 0x1.0p-53;
}

void apply_logit_processors(std::span<float> logits, const sampling_params& p, int num_output,
                            std::span<const std::int32_t> eos_ids) {
  const auto vocab = std::int32_t(logits.size());
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[std::size_t(id)] += bias;
  if (num_output >= p.min_tokens) return;
  const float banned = -std::numeric_limits<float>::infinity();
  if (!p.ignore_eos)
    for (auto id : eos_ids)
      if (id >= 0 && id < vocab) logits[std::size_t(id)] = banned;
  for (auto id : p.stop_token_ids)
    if (id >= 0 && id < vocab) logits[std::size_t(id)] = banned;
}

void apply_penalties(std::span<float> logits, const sampling_params& p, std::span<const std::int32_t> prompt,
                     std::span<const std::int32_t> output) {
  const auto vocab = std::int32_t(logits.size());
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (auto t : prompt) if (t >= 0 && t < vocab) seen[std::size_t(t)] = true;
    for (auto t : output) if (t >= 0 && t < vocab) seen[std::size_t(t)] = true;
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<std::int32_t, int> counts;
    for (auto t : output) if (t >= 0 && t < vocab) ++counts[t];
    for (auto& [t, n] : counts) logits[std::size_t(t)] -= p.frequency_penalty * float(n) + p.presence_penalty;
  }
}

std::int32_t choose_token(std::span<const float> logits, const sampling_params& p, std::uint64_t seed,
                          std::int64_t position) {
  if (p.greedy()) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = i;
    return std::int32_t(best);
  }
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l);
  std::vector<candidate> c(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    c[i] = {std::exp((double(logits[i]) - mx) / p.temperature), std::int32_t(i)};
    total += c[i].prob;
  }
  for (auto& x : c) x.prob /= total;
  // min-p, then top-k, then top-p over what remains (renormalised).
  if (p.min_p > 0.0f) {
    double pmax = 0;
    for (auto& x : c) pmax = std::max(pmax, x.prob);
    const double floor = p.min_p * pmax;
    c.erase(std::remove_if(c.begin(), c.end(), [&](const candidate& x) { return x.prob < floor; }), c.end());
  }
  std::size_t n = c.size();
  if (p.top_k > 0 || p.top_p < 1.0f) {
    double remaining = 0;
    for (auto& x : c) remaining += x.prob;
    n = sort_head(c, p.top_k > 0 ? 2.0 * remaining : double(p.top_p) * remaining, std::size_t(p.top_k));
    if (p.top_p < 1.0f) {
      double head = remaining;  // top-p renormalises over the top-k when both are set
      if (p.top_k > 0) {
        head = 0;
        for (std::size_t i = 0; i < n; ++i) head += c[i].prob;
      }
      double cum = 0;
      std::size_t keep = 0;
      while (keep < n && cum < double(p.top_p) * head) cum += c[keep++].prob;
      n = std::max<std::size_t>(keep, 1);
    }
  }
  double kept = 0;
  for (std::size_t i = 0; i < n; ++i) kept += c[i].prob;
  const double target = position_uniform(seed, position) * kept;
  double cum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    cum += c[i].prob;
    if (target < cum) return c[i].id;
  }
  return c[n - 1].id;
}

std::int32_t rank_of(std::span<const float> logits, std::int32_t token) {
  const float at = logits[std::size_t(token)];
  std::int32_t rank = 1;
  for (float x : logits) rank += x > at;
  return rank;
}

token_logprobs logprobs_of(std::span<const float> logits, std::int32_t chosen, int top) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float x : logits) mx = std::max(mx, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  const double lse = double(mx) + std::log(sum);
  token_logprobs r;
  r.logprob = float(double(logits[std::size_t(chosen)]) - lse);
  top = std::min<int>(top, int(logits.size()));
  if (top > 0) {
    std::vector<std::int32_t> ids(logits.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(i);
    std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logits[std::size_t(a)] > logits[std::size_t(b)] || (logits[std::size_t(a)] == logits[std::size_t(b)] && a < b);
    });
    for (int i = 0; i < top; ++i) {
      r.top_ids.push_back(ids[std::size_t(i)]);
      r.top_logprobs.push_back(float(double(logits[std::size_t(ids[std::size_t(i)])]) - lse));
    }
  }
  return r;
}

}  // namespace troupe::sampling
