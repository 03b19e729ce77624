#include "runtime/admin/cluster_status.h"

namespace troupe::admin {

std::string state_of(const replica_status& r) {
  if (r.stopped) return "stopped";
  if (r.starting) return "starting";
  if (!r.registered) return "starting";
  if (!r.alive) return "dead";
  if (r.parked && !r.draining) return "warm";
  if (!r.draining) return "running";
  const bool empty = r.has_load && r.load.running == 0 && r.load.waiting == 0 && r.load.handoffs_held == 0;
  return empty ? "drained" : "draining";
}

std::optional<std::size_t> find_replica(const std::vector<replica_status>& rs, const std::string& name) {
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (rs[i].name == name) return i;
  return std::nullopt;
}

double usage(const replica_load& l) { return l.total_blocks > 0 ? double(l.used_blocks) / l.total_blocks : 0.0; }

pool_census census_of(const std::vector<replica_status>& rs, const std::string& pool) {
  pool_census c;
  for (const auto& r : rs)
    if (r.pool == pool) {
      const std::string st = state_of(r);
      c.serving += st == "running" || st == "draining" ? 1 : 0;
      c.warm += st == "warm" ? 1 : 0;
      c.stopped += st == "stopped" ? 1 : 0;
    }
  return c;
}

nlohmann::json status_json(const std::vector<replica_status>& rs, const std::vector<std::string>& nodes,
                           const std::vector<pool_bounds>& pools) {
  nlohmann::json out{{"nodes", nlohmann::json::array()}, {"replicas", nlohmann::json::array()}, {"pools", nlohmann::json::array()}};
  for (const auto& p : pools) {
    const pool_census c = census_of(rs, p.name);
    out["pools"].push_back({{"name", p.name}, {"replicas", c.serving}, {"warm", c.warm}, {"stopped", c.stopped}, {"warm_target", p.warm}, {"min", p.min}, {"max", p.max}, {"slots", p.slots}});
  }
  for (const auto& n : nodes) {
    int alive = 0, total = 0;
    for (const auto& r : rs)
      if (r.node == n) {
        ++total;
        alive += r.alive ? 1 : 0;
      }
    out["nodes"].push_back({{"name", n}, {"replicas", total}, {"replicas_alive", alive}});
  }
  double tps = 0;
  for (const auto& r : rs) {
    const replica_load& l = r.load;
    tps += l.tokens_per_s;
    out["replicas"].push_back({{"name", r.name},
                               {"id", r.id},
                               {"pool", r.pool},
                               {"role", r.role},
                               {"node", r.node},
                               {"state", state_of(r)},
                               {"generation", r.generation},
                               {"model_key", l.model_key.empty() ? nlohmann::json() : nlohmann::json(l.model_key)},
                               {"running", l.running},
                               {"waiting", l.waiting},
                               {"kv_used_blocks", l.used_blocks},
                               {"kv_total_blocks", l.total_blocks},
                               {"kv_usage", usage(l)},
                               {"tokens_per_s", l.tokens_per_s},
                               {"spec_draft_tokens", l.spec_draft_tokens},
                               {"spec_accepted_tokens", l.spec_accepted_tokens},
                               // accepted / proposed; null while it proposed nothing (speculation off or idle)
                               {"spec_acceptance", l.spec_draft_tokens ? nlohmann::json(double(l.spec_accepted_tokens) / double(l.spec_draft_tokens))
                                                                       : nlohmann::json()}});
  }
  out["tokens_per_s"] = tps;
  return out;
}

nlohmann::json kv_json(const std::vector<replica_status>& rs) {
  nlohmann::json out{{"replicas", nlohmann::json::array()}};
  for (const auto& r : rs) {
    const replica_load& l = r.load;
    out["replicas"].push_back({{"name", r.name},
                               {"state", state_of(r)},
                               {"used_blocks", l.used_blocks},
                               {"total_blocks", l.total_blocks},
                               {"usage", usage(l)},
                               {"cached_blocks", l.cached_blocks},
                               {"prefix_queries", l.prefix_queries},
                               {"prefix_hits", l.prefix_hits},
                               {"prefix_hit_rate", l.prefix_queries ? double(l.prefix_hits) / double(l.prefix_queries) : 0.0}});
  }
  return out;
}

}  // namespace troupe::admin
