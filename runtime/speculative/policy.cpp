#include "runtime/speculative/policy.h"

#include <algorithm>

namespace troupe::speculative {

namespace {

// How much of the past each new observation keeps: about the last 10 steps (acceptance) and the
// last 50 steps (cost) carry the estimate.
constexpr double acceptance_keep = 0.9;
constexpr double cost_keep = 0.98;

}  // namespace

void acceptance::observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  accepted = std::clamp(accepted, 0, proposed);
  accepted_ = accepted_ * acceptance_keep + accepted;
  rejected_ = rejected_ * acceptance_keep + (accepted < proposed ? 1.0 : 0.0);
}

double acceptance::rate() const { return accepted_ / (accepted_ + rejected_); }

void step_cost::observe(int rows, double seconds) {
  const double x = rows;
  w_ = w_ * cost_keep + 1;
  sx_ = sx_ * cost_keep + x;
  sy_ = sy_ * cost_keep + seconds;
  sxx_ = sxx_ * cost_keep + x * x;
  sxy_ = sxy_ * cost_keep + x * seconds;
}

std::optional<double> step_cost::seconds(int rows) const {
  if (w_ <= 0) return std::nullopt;
  const double mx = sx_ / w_, my = sy_ / w_;
  const double var = sxx_ / w_ - mx * mx;
  if (var < 1e-6) return std::nullopt;  // one size of step seen: no slope yet
  const double slope = std::max(0.0, (sxy_ / w_ - mx * my) / var);  // noise must not make rows free
  return std::max(1e-9, my + slope * (rows - mx));
}

std::vector<int> plan_lengths(const plan_inputs& in, const step_cost& cost) {
  std::vector<int> k(in.acceptance.size(), 0);
  if (in.k_max <= 0 || k.empty()) return k;
  std::vector<int> most(k.size(), in.k_max);
  for (std::size_t i = 0; i < k.size() && i < in.k_cap.size(); ++i) most[i] = std::clamp(in.k_cap[i], 0, in.k_max);
  if (!cost.seconds(in.base_rows)) {
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = in.acceptance[i] > 0 && most[i] > 0 ? 1 : 0;
    return k;
  }
  auto seconds = [&](int rows, int deepest) { return *cost.seconds(rows) + deepest * in.draft_seconds_per_position; };
  // gain[i]: the tokens sequence i's next proposal adds, a^(k+1); each proposal multiplies it by a.
  std::vector<double> gain(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) gain[i] = std::clamp(in.acceptance[i], 0.0, 1.0);
  double tokens = std::max(in.base_tokens, 1);
  int rows = in.base_rows, deepest = 0;
  double rate = tokens / seconds(rows, 0);
  for (;;) {
    std::size_t best = k.size();
    for (std::size_t i = 0; i < k.size(); ++i)
      if (k[i] < most[i] && gain[i] > 0 && (best == k.size() || gain[i] > gain[best])) best = i;
    if (best == k.size()) break;
    const int next_deepest = std::max(deepest, k[best] + 1);
    const double next_rate = (tokens + gain[best]) / seconds(rows + 1, next_deepest);
    if (next_rate <= rate) break;
    tokens += gain[best], gain[best] *= std::clamp(in.acceptance[best], 0.0, 1.0);
    ++k[best], ++rows, deepest = next_deepest, rate = next_rate;
  }
  if (in.explore && std::all_of(k.begin(), k.end(), [](int x) { return x == 0; })) {
    std::size_t best = k.size();
    for (std::size_t i = 0; i < k.size(); ++i)
      if (most[i] > 0 && in.acceptance[i] > 0 && (best == k.size() || in.acceptance[i] > in.acceptance[best])) best = i;
    if (best < k.size()) k[best] = 1;
  }
  return k;
}

}  // namespace troupe::speculative
