// A rollout's quality gate (`rollout ... --held-out FILE --prompts FILE`, docs/admin.md): what
// the canary answers, not how fast. At each step the admin actor sends one canary replica and
// one baseline replica the same probes, straight to their schedulers: windows of held-out text
// scored token by token (perplexity), and prompts answered greedily. The canary breaches the
// gate when its perplexity exceeds the baseline's by more than a ratio, or when too few of its
// greedy answers agree with the baseline's. Live figures (rollout.h) catch a slow revision;
// this catches a wrong one, whose latency is as good as the baseline's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::admin {

struct quality_gate {
  std::string held_out;    // a text file the head reads; empty: no perplexity probe
  std::string prompts;     // a file of prompts, one per line; empty: no greedy probe
  double max_ppl_ratio = 1.05;    // the canary's perplexity over the baseline's, at most
  double min_greedy_match = 0.8;  // mean share of each greedy answer the canary gets right, at least
  int window = 128;        // tokens in each held-out window
  int max_windows = 8;     // windows scored, from the text's start
  int greedy_tokens = 16;  // tokens each prompt is answered with
  int max_prompts = 32;    // prompts used, from the file's start
  bool on() const { return !held_out.empty() || !prompts.empty(); }
};

// The probes as token ids: held-out windows (each scored after its first token) and prompts.
struct quality_set {
  std::vector<std::vector<std::int32_t>> windows;
  std::vector<std::vector<std::int32_t>> prompts;
  int greedy_tokens = 0;
  bool empty() const { return windows.empty() && prompts.empty(); }
};

// Cuts the held-out text's ids into up to max_windows whole windows (one shorter window when
// the text is shorter than one) and keeps up to max_prompts non-empty prompts.
quality_set make_quality_set(const std::vector<std::int32_t>& held_out_ids, const std::vector<std::vector<std::int32_t>>& prompt_ids,
                             const quality_gate& gate);

// A file's non-empty lines (a trailing '\r' dropped), up to `max`.
std::vector<std::string> prompt_lines(const std::string& text, std::size_t max);

// What one replica answered to a quality_set.
struct quality_sample {
  double nll = 0;            // summed negative log-likelihood of the scored held-out tokens
  std::int64_t scored = 0;   // how many were scored
  std::vector<std::vector<std::int32_t>> answers;  // per prompt, its greedy tokens
  double perplexity() const;  // exp(nll / scored); 0 when nothing was scored
};

// Mean over prompts of the share of the longer answer that both start with: 1 when every
// answer is the same, 0 when every first token differs. 1 when there are no prompts.
double greedy_match(const std::vector<std::vector<std::int32_t>>& canary, const std::vector<std::vector<std::int32_t>>& baseline);

// Why the canary's sample breaches the gate against the baseline's (with both figures), or nothing.
std::optional<std::string> quality_breach(const quality_sample& canary, const quality_sample& baseline, const quality_gate& gate);

// One line with both sides' figures, for a decision's reason when the gate holds.
std::string quality_summary(const quality_sample& canary, const quality_sample& baseline);

}  // namespace troupe::admin
