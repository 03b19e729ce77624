#include "runtime/autoscale/signals.h"

namespace troupe::autoscale {

std::map<std::string, pool_signals> signals_of(const std::vector<admin::replica_status>& replicas,
                                               const std::vector<admin::pool_bounds>& pools,
                                               const std::vector<admission::pool_latency>& latencies, std::chrono::milliseconds fresh) {
  const double fresh_s = std::chrono::duration<double>(fresh).count();
  auto recent = [&](double value, double age) { return age >= 0 && age <= fresh_s ? value : 0.0; };
  std::map<std::string, pool_signals> out;
  for (const auto& p : pools) {
    auto& s = out[p.name];
    const admin::pool_census c = admin::census_of(replicas, p.name);
    s.serving = c.serving;
    s.warm = c.warm;
    s.min = p.min;
    s.max = p.max;
    s.slots = p.slots;
  }
  for (const auto& l : latencies) {
    auto it = out.find(l.pool);
    if (it == out.end()) continue;
    it->second.ttft_s = recent(l.ttft_s, l.ttft_age_s);
    it->second.itl_s = recent(l.itl_s, l.itl_age_s);
  }
  std::map<std::string, int> counted;
  for (const auto& r : replicas) {
    auto it = out.find(r.pool);
    if (it == out.end()) continue;
    if (admin::state_of(r) != "running") continue;
    it->second.waiting += r.load.waiting;
    it->second.running += r.load.running;
    it->second.kv_usage += admin::usage(r.load);
    ++counted[r.pool];
  }
  for (auto& [pool, s] : out)
    if (counted[pool] > 0) s.kv_usage /= counted[pool];
  return out;
}

}  // namespace troupe::autoscale
