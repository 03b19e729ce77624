#include "runtime/routing/policy.h"

#include <algorithm>
#include <mutex>

#include "runtime/common/error.h"
#include "runtime/routing/kv_aware_cost.h"

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
  if (alive.empty()) return {std::nullopt, "round_robin: no live replica", "no_replica"};
  const std::size_t pick = alive[index % alive.size()];
  return {pick, "round_robin: turn " + std::to_string(index) + " -> replica " + to_string(replicas[pick].replica), "turn"};
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
  if (!best) return {std::nullopt, "least_loaded: no live replica", "no_replica"};
  return {best, "least_loaded: replica " + to_string(replicas[*best].replica) + " scores " + std::to_string(best_score), "load"};
}

kv_aware_weights kv_aware_weights::of(const policy_params& p) {
  return {param(p, "prefix_weight", 1.0), param(p, "token_weight", 1.0 / 256), param(p, "running_weight", 1.0),
          param(p, "usage_weight", 0.0)};
}

double kv_aware_weights::cost(const route_request& r, const replica_load& x) const {
  const double cached = double(std::min(x.cached_blocks * r.block_size, r.prompt_tokens));
  const double use = x.total_blocks > 0 ? 1.0 - double(x.free_blocks) / x.total_blocks : 0.0;
  return token * (x.waiting_prompt_tokens + r.prompt_tokens - prefix * cached) + running * x.running_seqs + usage * use;
}

decision kv_aware(const route_request& r, std::span<const replica_load> replicas, const policy_params& p,
                  std::uint64_t index) {
  const bool incomplete = std::any_of(replicas.begin(), replicas.end(), [](const replica_load& x) {
    return x.alive && !x.index_complete;
  });
  if (incomplete) {
    decision d = least_loaded(r, replicas, {{"running_weight", param(p, "running_weight", 1.0)},
                                            {"token_weight", param(p, "token_weight", 1.0 / 256)}}, index);
    d.why = "kv_aware (index incomplete, by load): " + d.why;
    if (d.index) d.reason = "index_incomplete";
    return d;
  }
  const kv_aware_weights w = kv_aware_weights::of(p);
  std::optional<std::size_t> best;
  double best_cost = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const auto& x = replicas[i];
    if (!x.alive) continue;
    const double cost = w.cost(r, x);
    if (!best || cost < best_cost || (cost == best_cost && x.replica < replicas[*best].replica)) {
      best = i;
      best_cost = cost;
    }
  }
  if (!best) return {std::nullopt, "kv_aware: no live replica", "no_replica"};
  const auto& b = replicas[*best];
  const int hit = std::min(b.cached_blocks * r.block_size, r.prompt_tokens);
  return {best, "kv_aware: replica " + to_string(b.replica) + " holds " + std::to_string(hit) + " of " +
                    std::to_string(r.prompt_tokens) + " prompt tokens, cost " + std::to_string(best_cost),
          hit > 0 ? "prefix_hit" : "no_hit"};
}

registry& registry::global() {
  static registry r = [] {
    registry g;
    g.add("round_robin", round_robin);
    g.add("least_loaded", least_loaded, {"running_weight", "token_weight"});
    g.add("kv_aware", kv_aware, {"prefix_weight", "token_weight", "running_weight", "usage_weight"});
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
