#include "runtime/routing/policy.h"

#include <mutex>

#include "runtime/common/error.h"

namespace troupe::routing {

namespace {
std::mutex registry_mu;

double param(const policy_params& p, const char* name, double fallback) {
  auto it = p.find(name);
  return it == p.end() ? fallback : it->second;
}
}  // namespace

decision round_robin(const route_request&, std::span<const replica_load> replicas, const policy_params&,
                     std::uint64_t index) {
  std::vector<std::size_t> alive;
  for (std::size_t i = 0; i < replicas.size(); ++i)
    if (replicas[i].alive) alive.push_back(i);
  if (alive.empty()) return {std::nullopt, "round_robin: no live replica"};
  const std::size_t pick = alive[index % alive.size()];
  return {pick, "round_robin: turn " + std::to_string(index) + " -> replica " + std::to_string(replicas[pick].replica)};
}

decision least_loaded(const route_request& r, std::span<const replica_load> replicas, const policy_params& p,
                      std::uint64_t) {
  const double w_run = param(p, "running_weight", 1.0);
  const double w_tok = param(p, "token_weight", 1.0 / 256);
  std::optional<std::size_t> best;
  double best_score = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const auto& x = replicas[i];
    if (!x.alive) continue;
    const double score = w_run * x.running_seqs + w_tok * (x.waiting_prompt_tokens + r.prompt_tokens);
    if (!best || score < best_score || (score == best_score && x.replica < replicas[*best].replica)) {
      best = i;
      best_score = score;
    }
  }
  if (!best) return {std::nullopt, "least_loaded: no live replica"};
  return {best, "least_loaded: replica " + std::to_string(replicas[*best].replica) + " scores " + std::to_string(best_score)};
}

registry& registry::global() {
  static registry r = [] {
    registry g;
    g.add("round_robin", round_robin);
    g.add("least_loaded", least_loaded, {"running_weight", "token_weight"});
    return g;
  }();
  return r;
}

void registry::add(const std::string& name, policy p, std::vector<std::string> params) {
  std::lock_guard<std::mutex> lock(registry_mu);
  entries_[name] = {std::move(p), std::move(params)};
}

bool registry::has(const std::string& name) const {
  std::lock_guard<std::mutex> lock(registry_mu);
  return entries_.count(name) != 0;
}

const policy& registry::get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string known;
    for (auto& [n, e] : entries_) known += (known.empty() ? "" : ", ") + n;
    throw input_error("unknown routing policy '" + name + "' (known: " + known + ")");
  }
  return it->second.fn;
}

const std::vector<std::string>& registry::params_of(const std::string& name) const {
  get(name);
  std::lock_guard<std::mutex> lock(registry_mu);
  return entries_.at(name).params;
}

std::vector<std::string> registry::names() const {
  std::lock_guard<std::mutex> lock(registry_mu);
  std::vector<std::string> out;
  for (auto& [n, e] : entries_) out.push_back(n);
  return out;
}

}  // namespace troupe::routing
