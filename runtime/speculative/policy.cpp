#include "runtime/speculative/policy.h"

#include <algorithm>
#include <cmath>

namespace troupe::speculative {

namespace {

// How much of the past each new observation keeps: about the last 10 steps (acceptance) and the
// last 50 steps (cost) carry the estimate.
constexpr double acceptance_keep = 0.9;
constexpr double cost_keep = 0.98;
// A plan must beat plain decoding by this much, or nothing is proposed: the fitted line is off by
// a few percent, and what it leaves out (rollback, the proposer's work outside its forward) is not
// free. On kjv-1b at concurrency 32 a draft proposing where the line said it about broke even
// lost 7%.
constexpr double min_gain = 0.05;

}  // namespace

void acceptance::observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  accepted = std::clamp(accepted, 0, proposed);
  accepted_ = accepted_ * acceptance_keep + accepted;
  rejected_ = rejected_ * acceptance_keep + (accepted < proposed ? 1.0 : 0.0);
}

double acceptance::rate() const { return accepted_ / (accepted_ + rejected_); }

acceptance acceptance::starting_from(const acceptance& replica) {
  acceptance a;
  a.accepted_ = 2 * replica.rate();
  a.rejected_ = 2 - a.accepted_;
  return a;
}

void step_cost::observe(int rows, double seconds, bool verifying) {
  const double x[3] = {1.0, double(rows), verifying ? 1.0 : 0.0};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) s_[i][j] = s_[i][j] * cost_keep + x[i] * x[j];
    r_[i] = r_[i] * cost_keep + x[i] * seconds;
  }
}

std::optional<double> step_cost::seconds(int rows, bool verifying) const {
  const double w = s_[0][0];
  if (w <= 0) return std::nullopt;
  const double mx = s_[0][1] / w, var = s_[1][1] / w - mx * mx;
  if (var < 1e-6) return std::nullopt;  // one size of step seen: no slope yet
  // Centred on the weighted means, the fit is a 2x2 system in (slope, jump); where the verifying
  // steps cannot be told apart from the rows (all of one kind, or always the same rows), the
  // jump is left at 0 and the line is rows alone.
  const double mv = s_[0][2] / w, my = r_[0] / w;
  const double cxx = var, cxv = s_[1][2] / w - mx * mv, cvv = s_[2][2] / w - mv * mv;
  const double cxy = r_[1] / w - mx * my, cvy = r_[2] / w - mv * my;
  double slope = cxy / cxx, jump = 0;
  const double det = cxx * cvv - cxv * cxv;
  if (cvv > 1e-6 && det > 1e-6 * cxx * cvv) {
    slope = (cxy * cvv - cvy * cxv) / det;
    jump = std::max(0.0, (cvy * cxx - cxy * cxv) / det);  // noise must not make verifying free
  }
  slope = std::max(0.0, slope);  // noise must not make rows free
  return std::max(1e-9, my + slope * (rows - mx) + jump * ((verifying ? 1.0 : 0.0) - mv));
}

int step_costs::size_of(int base_rows) {
  int b = 0;
  while (b + 1 < sizes && base_rows >= (2 << b)) ++b;
  return b;
}

void step_costs::observe(int base_rows, int rows, double seconds, bool verifying) {
  all_.observe(rows, seconds, verifying);
  by_size_[size_of(base_rows)].observe(rows, seconds, verifying);
}

const step_cost& step_costs::at(int base_rows) const {
  const step_cost& local = by_size_[size_of(base_rows)];
  return local.seconds(base_rows) ? local : all_;
}

std::size_t explored(const plan_inputs& in) {
  std::size_t best = in.acceptance.size();
  for (std::size_t i = 0; i < in.acceptance.size(); ++i) {
    const int most = i < in.k_cap.size() ? std::min(in.k_cap[i], in.k_max) : in.k_max;
    if (most > 0 && in.acceptance[i] > 0 && (best == in.acceptance.size() || in.acceptance[i] > in.acceptance[best])) best = i;
  }
  return best;
}

double exploration_seconds(const plan_inputs& in) {
  const std::size_t i = explored(in);
  if (i >= in.acceptance.size()) return 0;
  const int catch_up = i < in.catch_up.size() ? std::max(in.catch_up[i], 0) : 0;
  return in.draft.seconds(1, catch_up + 1);
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
  auto catch_up = [&](std::size_t i) { return i < in.catch_up.size() ? std::max(in.catch_up[i], 0) : 0; };
  const double base_seconds = *cost.seconds(in.base_rows);
  const double own = std::min(in.decode_seconds.value_or(base_seconds), base_seconds);
  auto seconds = [&](int rows, int deepest, int fed) {
    return own + (*cost.seconds(rows, deepest > 0) - base_seconds) + in.draft.seconds(deepest, fed);
  };
  // gain[i]: the tokens sequence i's next proposal adds, a^(k+1); each proposal multiplies it by a.
  std::vector<double> gain(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) gain[i] = std::clamp(in.acceptance[i], 0.0, 1.0);
  double tokens = std::max(in.base_tokens, 1);
  int rows = in.base_rows, deepest = 0, fed = 0;  // fed: positions the draft computes
  double best_rate = tokens / seconds(rows, 0, 0);
  const double plain_rate = best_rate;
  std::vector<int> best_k = k;
  for (;;) {
    std::size_t best = k.size();
    for (std::size_t i = 0; i < k.size(); ++i)
      if (k[i] < most[i] && gain[i] > 0 && (best == k.size() || gain[i] > gain[best])) best = i;
    if (best == k.size()) break;
    deepest = std::max(deepest, k[best] + 1);
    fed += 1 + (k[best] == 0 ? catch_up(best) : 0);
    tokens += gain[best], gain[best] *= std::clamp(in.acceptance[best], 0.0, 1.0);
    ++k[best], ++rows;
    const double rate = tokens / seconds(rows, deepest, fed);
    if (rate > best_rate) best_rate = rate, best_k = k;
  }
  if (best_rate < plain_rate * (1 + min_gain)) std::fill(best_k.begin(), best_k.end(), 0);
  k = std::move(best_k);
  if (in.explore && std::all_of(k.begin(), k.end(), [](int x) { return x == 0; })) {
    const std::size_t best = explored(in);
    if (best < k.size()) k[best] = 1;
  }
  return k;
}

int explore_interval(const step_cost& cost, int base_rows, int probe_every, double propose_seconds) {
  const auto plain = cost.seconds(base_rows, false), verifying = cost.seconds(base_rows + 1, true);
  if (!plain || !verifying) return probe_every;
  const double extra = (*verifying - *plain + std::max(propose_seconds, 0.0)) / *plain;  // of a step, per exploration
  return std::max(probe_every, int(std::min(1e6, std::ceil(100.0 * extra))));
}

}  // namespace troupe::speculative
