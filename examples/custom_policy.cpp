// Writing a routing policy and registering it by name, so a topology can say
//   [router]
//   policy = "prefer_free_blocks"
//   [router.params]
//   min_free = 32
// A policy is a pure function of the request and the replicas' last reported load: it only
// decides; the router actor does the sending.
#include <cstdio>
#include <vector>

#include "runtime/routing/policy.h"

using namespace troupe::routing;

// Picks the live replica with the most free KV blocks, skipping those below `min_free`.
decision prefer_free_blocks(const route_request&, std::span<const replica_load> replicas,
                            const policy_params& params, std::uint64_t) {
  const auto it = params.find("min_free");
  const int min_free = it == params.end() ? 0 : int(it->second);
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i].alive || replicas[i].free_blocks < min_free) continue;
    if (!best || replicas[i].free_blocks > replicas[*best].free_blocks) best = i;
  }
  if (!best) return {std::nullopt, "prefer_free_blocks: every replica is below min_free"};
  return {best, "prefer_free_blocks: replica " + to_string(replicas[*best].replica), "free_blocks"};
}

int main() {
  registry::global().add("prefer_free_blocks", prefer_free_blocks, {"min_free"});

  std::vector<replica_load> replicas = {
      {troupe::replica_id(0), true, 3, 0, 40, 100}, {troupe::replica_id(1), true, 1, 0, 90, 100},
      {troupe::replica_id(2), false, 0, 0, 100, 100}};
  const policy& p = registry::global().get("prefer_free_blocks");
  decision d = p({1, 20, 0}, replicas, {{"min_free", 32}}, 0);
  std::printf("%s\n", d.why.c_str());  // replica 1: the dead replica 2 is never chosen
  d = p({2, 20, 0}, replicas, {{"min_free", 95}}, 1);
  std::printf("%s\n", d.why.c_str());
  return d.index ? 1 : 0;
}
