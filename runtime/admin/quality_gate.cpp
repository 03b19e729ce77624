#include "runtime/admin/quality_gate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace troupe::admin {

quality_set make_quality_set(const std::vector<std::int32_t>& held_out_ids, const std::vector<std::vector<std::int32_t>>& prompt_ids,
                             const quality_gate& gate) {
  quality_set s;
  const std::size_t window = std::size_t(std::max(2, gate.window));
  for (std::size_t at = 0; at + window <= held_out_ids.size() && int(s.windows.size()) < gate.max_windows; at += window)
    s.windows.emplace_back(held_out_ids.begin() + long(at), held_out_ids.begin() + long(at + window));
  if (s.windows.empty() && held_out_ids.size() >= 2 && gate.max_windows > 0) s.windows.push_back(held_out_ids);
  for (const auto& p : prompt_ids)
    if (!p.empty() && int(s.prompts.size()) < gate.max_prompts) s.prompts.push_back(p);
  s.greedy_tokens = gate.greedy_tokens;
  return s;
}

std::vector<std::string> prompt_lines(const std::string& text, std::size_t max) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size() && out.size() < max;) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) out.push_back(line);
    at = end + 1;
  }
  return out;
}

double quality_sample::perplexity() const { return scored > 0 ? std::exp(nll / double(scored)) : 0.0; }

double greedy_match(const std::vector<std::vector<std::int32_t>>& canary, const std::vector<std::vector<std::int32_t>>& baseline) {
  const std::size_t n = std::min(canary.size(), baseline.size());
  if (n == 0) return 1.0;
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = canary[i];
    const auto& b = baseline[i];
    const std::size_t longer = std::max(a.size(), b.size());
    if (longer == 0) {
      sum += 1;
      continue;
    }
    const auto diverge = std::mismatch(a.begin(), a.begin() + long(std::min(a.size(), b.size())), b.begin());
    sum += double(diverge.first - a.begin()) / double(longer);
  }
  return sum / double(n);
}

namespace {

std::string figures(const char* f, double a, double b, double c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

}  // namespace

std::optional<std::string> quality_breach(const quality_sample& canary, const quality_sample& baseline, const quality_gate& gate) {
  const double cp = canary.perplexity(), bp = baseline.perplexity();
  if (canary.scored > 0 && bp > 0 && cp / bp > gate.max_ppl_ratio)
    return figures("quality: held-out perplexity %.3f against the baseline's %.3f (%.3fx", cp, bp, cp / bp) +
           figures(", bound %.3fx)", gate.max_ppl_ratio, 0, 0);
  const double match = greedy_match(canary.answers, baseline.answers);
  if (!baseline.answers.empty() && match < gate.min_greedy_match)
    return figures("quality: greedy answers agree with the baseline's on %.0f%% of their tokens (%.0f prompts, bound %.0f%%)", match * 100,
                   double(baseline.answers.size()), gate.min_greedy_match * 100);
  return std::nullopt;
}

std::string quality_summary(const quality_sample& canary, const quality_sample& baseline) {
  std::string s;
  if (baseline.scored > 0)
    s = figures("held-out perplexity %.3f against the baseline's %.3f over %.0f tokens", canary.perplexity(), baseline.perplexity(),
                double(baseline.scored));
  if (!baseline.answers.empty())
    s += (s.empty() ? "" : "; ") + figures("greedy answers agree on %.0f%% of their tokens (%.0f prompts)",
                                           greedy_match(canary.answers, baseline.answers) * 100, double(baseline.answers.size()), 0);
  return s;
}

}  // namespace troupe::admin
