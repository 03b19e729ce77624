// What the admin console shows of a cluster, as plain values: each replica's place in the
// topology and its last load, shaped into the JSON results of `status` and `kv`
// (docs/admin.md). Pure: the admin actor gathers the values, this decides their form.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::admin {

// What a replica's last load report said.
struct replica_load {
  int running = 0, waiting = 0;
  int used_blocks = 0, total_blocks = 0, cached_blocks = 0;
  int handoffs_held = 0;
  std::uint64_t prefix_queries = 0, prefix_hits = 0;
  double tokens_per_s = 0;  // generated, over the last sampling interval
  // Speculative decoding since the replica started: tokens proposed, and accepted into outputs.
  std::uint64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::string model_key;  // the cache key of the weights it runs (which revision; a swap changes it)
};

struct replica_status {
  std::uint32_t id = 0;
  std::string name;  // "<pool>-<index in the pool>", what kill / drain / resume take
  std::string pool, role, node;
  bool registered = false;  // has joined at least once
  bool alive = false;
  bool draining = false;
  bool parked = false;           // in the warm pool: alive, placed on by nobody
  bool stopped = false;          // not running on purpose: a slot scaling up may start
  bool starting = false;         // asked to start, not registered since
  std::uint32_t generation = 0;  // registrations: 1 never restarted
  bool has_load = false;         // answered the last load query
  replica_load load;             // zero while it is not alive
  // The generated-token count at the last sample, and when (Unix seconds; 0: none yet).
  std::uint64_t sampled_tokens = 0;
  double sampled_at = 0;
};

// "stopped" (not started, or stopped by a scale-down: scaling up may start it), "starting" (never
// registered), "dead", "warm" (started, placed on by nobody: scaling up takes it), "running",
// "draining", "drained" (safe to remove).
std::string state_of(const replica_status& r);

// The replica named `name`, or nullopt.
std::optional<std::size_t> find_replica(const std::vector<replica_status>& rs, const std::string& name);

// A pool's scaling bounds, for `status`.
struct pool_bounds {
  std::string name;
  int min = 1, max = 1;
  int slots = 0;  // sequences one replica runs at once (scheduler.max_seqs)
  int warm = 0;   // warm replicas the pool keeps ready (warm_replicas)
};

// The share of its KV blocks a replica uses (0 to 1; 0 before it reported).
double usage(const replica_load& l);

// A pool's replicas by state: serving (running or draining), warm, stopped.
struct pool_census {
  int serving = 0, warm = 0, stopped = 0;
};
pool_census census_of(const std::vector<replica_status>& rs, const std::string& pool);

nlohmann::json status_json(const std::vector<replica_status>& rs, const std::vector<std::string>& nodes,
                           const std::vector<pool_bounds>& pools = {});
nlohmann::json kv_json(const std::vector<replica_status>& rs);

}  // namespace troupe::admin
