#include "runtime/admin/rollout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <utility>

namespace troupe::admin {

namespace {

// A non-negative number followed by one of `units` (its scale); nothing otherwise.
std::optional<double> parse_scaled(const std::string& s, std::initializer_list<std::pair<const char*, double>> units) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    for (const auto& [unit, scale] : units)
      if (s.substr(used) == unit && v >= 0) return v * scale;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// "500ms", "30s", "5m", "1h" -> seconds (above 0); nothing otherwise.
std::optional<double> parse_duration(const std::string& s) {
  auto d = parse_scaled(s, {{"ms", 0.001}, {"s", 1}, {"m", 60}, {"h", 3600}});
  return d && *d > 0 ? d : std::nullopt;
}

std::optional<double> parse_positive(const std::string& s) { return parse_scaled(s, {{"", 1}}); }

// "10%" or "0.1" -> 0.1, in (0, 1]; nothing otherwise.
std::optional<double> parse_share(const std::string& s) {
  auto v = parse_scaled(s, {{"%", 0.01}, {"", 1}});
  return v && *v > 0 && *v <= 1 ? v : std::nullopt;
}

std::string fmt(const char* f, double a, double b, double c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

double percentile_of(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p / 100 * double(v.size() - 1);
  const std::size_t lo = std::size_t(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - double(lo));
}

// A latency's p50 and p99 against the baseline's, when both have enough samples.
std::optional<std::string> slower(const char* what, const std::vector<double>& canary, const std::vector<double>& baseline, double bound,
                                  int min_samples) {
  if (int(canary.size()) < min_samples || int(baseline.size()) < min_samples) return std::nullopt;
  for (double p : {50.0, 99.0}) {
    const double c = percentile_of(canary, p), b = percentile_of(baseline, p);
    if (b > 0 && c / b > bound)
      return std::string(what) + " p" + std::to_string(int(p)) + fmt(" %.1f ms against the baseline's %.1f ms (%.2fx", c * 1000, b * 1000, c / b) +
             fmt(", bound %.2fx)", bound, 0, 0);
  }
  return std::nullopt;
}

}  // namespace

std::variant<rollout_request, std::string> parse_rollout(const std::vector<std::string>& args) {
  const std::string usage = "expected POOL --model DIR [--revision R] [--canary P%] [--step P%:DURATION] [gate flags]";
  if (args.empty() || args[0].rfind("--", 0) == 0) return usage;
  rollout_request r;
  r.pool = args[0];
  double canary = 0.1, grow = 0.1, hold = 300;
  for (std::size_t i = 1; i < args.size(); i += 2) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) return flag + " needs a value; " + usage;
    const std::string& v = args[i + 1];
    auto number = [&](double& into) -> std::optional<std::string> {
      auto x = parse_positive(v);
      if (!x) return flag + ": expected a number, got '" + v + "'";
      into = *x;
      return std::nullopt;
    };
    std::optional<std::string> bad;
    if (flag == "--model") {
      r.dir = v;
    } else if (flag == "--revision") {
      r.revision = v;
    } else if (flag == "--canary") {
      auto s = parse_share(v);
      if (!s || *s >= 1) return "--canary: expected a share below 100% such as 10%, got '" + v + "'";
      canary = *s;
    } else if (flag == "--step") {
      const auto colon = v.find(':');
      auto s = parse_share(v.substr(0, colon));
      auto d = colon == std::string::npos ? std::nullopt : parse_duration(v.substr(colon + 1));
      if (!s || !d) return "--step: expected SHARE:DURATION such as 10%:5m, got '" + v + "'";
      grow = *s, hold = *d;
    } else if (flag == "--max-ttft-ratio") {
      bad = number(r.gate.max_ttft_ratio);
    } else if (flag == "--max-itl-ratio") {
      bad = number(r.gate.max_itl_ratio);
    } else if (flag == "--max-error-rate") {
      bad = number(r.gate.max_error_rate);
    } else if (flag == "--max-refusal-rate") {
      bad = number(r.gate.max_refusal_rate);
    } else if (flag == "--min-requests") {
      double n = 0;
      bad = number(n);
      r.gate.min_requests = int(n);
    } else if (flag == "--held-out") {
      r.quality.held_out = v;
    } else if (flag == "--prompts") {
      r.quality.prompts = v;
    } else if (flag == "--max-ppl-ratio") {
      bad = number(r.quality.max_ppl_ratio);
    } else if (flag == "--min-greedy-match") {
      auto s = parse_share(v);
      if (!s) return "--min-greedy-match: expected a share such as 80%, got '" + v + "'";
      r.quality.min_greedy_match = *s;
    } else if (flag == "--greedy-tokens") {
      double n = 0;
      bad = number(n);
      if (!bad && (n < 1 || n > 256)) bad = "--greedy-tokens: expected 1 to 256, got '" + v + "'";
      r.quality.greedy_tokens = int(n);
    } else {
      return "unknown argument '" + flag + "'; " + usage;
    }
    if (bad) return *bad;
  }
  if (r.dir.empty()) return "--model DIR is required; " + usage;
  for (double s = canary; s < 1 - 1e-9; s += grow) r.steps.push_back({s, hold});
  return r;
}

void side_figures::add(const admission::replica_figures& f) {
  finished += int(f.finished);
  failed += int(f.failed);
  refused += int(f.refused);
  ttft_s.insert(ttft_s.end(), f.ttft_s.begin(), f.ttft_s.end());
  itl_s.insert(itl_s.end(), f.itl_s.begin(), f.itl_s.end());
}

std::optional<std::string> breach(const side_figures& canary, const side_figures& baseline, const rollout_gate& g) {
  if (canary.requests() >= g.min_requests) {
    auto share = [](int n, const side_figures& s) { return s.requests() ? double(n) / double(s.requests()) : 0.0; };
    const double ce = share(canary.failed, canary), be = share(baseline.failed, baseline);
    if (ce - be > g.max_error_rate)
      return fmt("error rate %.1f%% against the baseline's %.1f%% (bound +%.1f%%)", ce * 100, be * 100, g.max_error_rate * 100);
    const double cr = share(canary.refused, canary), br = share(baseline.refused, baseline);
    if (cr - br > g.max_refusal_rate)
      return fmt("refusal rate %.1f%% against the baseline's %.1f%% (bound +%.1f%%)", cr * 100, br * 100, g.max_refusal_rate * 100);
  }
  if (auto s = slower("TTFT", canary.ttft_s, baseline.ttft_s, g.max_ttft_ratio, g.min_requests)) return s;
  return slower("ITL", canary.itl_s, baseline.itl_s, g.max_itl_ratio, g.min_requests);
}

const char* phase_name(rollout_phase p) {
  switch (p) {
    case rollout_phase::canary: return "canary";
    case rollout_phase::paused: return "paused";
    case rollout_phase::promoting: return "promoting";
    case rollout_phase::promoted: return "promoted";
    case rollout_phase::rolling_back: return "rolling_back";
    case rollout_phase::rolled_back: return "rolled_back";
    case rollout_phase::failed: return "failed";
  }
  return "?";
}

bool under_way(rollout_phase p) {
  return p == rollout_phase::canary || p == rollout_phase::paused || p == rollout_phase::promoting || p == rollout_phase::rolling_back;
}

rollout_decision decide(const rollout_request& r, std::size_t step, double held_s, const std::optional<std::string>& breached,
                        bool quality_pending) {
  if (breached) return {rollout_decision::kind::roll_back, *breached};
  if (quality_pending || step >= r.steps.size() || held_s < r.steps[step].hold_s) return {};
  if (step + 1 < r.steps.size())
    return {rollout_decision::kind::advance, fmt("held %.0f%% for %.0f s within the gate", r.steps[step].share * 100, held_s, 0)};
  return {rollout_decision::kind::promote, fmt("held %.0f%% for %.0f s within the gate: the last step", r.steps[step].share * 100, held_s, 0)};
}

}  // namespace troupe::admin
