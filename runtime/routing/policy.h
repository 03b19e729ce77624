// Routing policies: pure functions that pick a replica for a request from a snapshot of the
// replicas' load. A policy decides; it does not forward (the router actor does that).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/ids.h"

namespace troupe::routing {

// What a replica last reported, as the router sees it.
struct replica_load {
  replica_id replica;                // id within the topology
  bool alive = true;                 // false while dead or draining: never chosen
  int running_seqs = 0;
  int waiting_prompt_tokens = 0;     // prompt tokens queued but not yet computed
  int free_blocks = 0;
  int total_blocks = 0;
  // This request's prefix as the router's index sees this replica: leading blocks it holds,
  // and whether the index is complete for it (kv_aware falls back to load otherwise).
  int cached_blocks = 0;
  bool index_complete = true;
};

struct route_request {
  std::uint64_t request = 0;
  int prompt_tokens = 0;
  int priority = 0;
  int block_size = 16;  // tokens per cached block (replica_load::cached_blocks)
};

// Named numeric parameters from the topology's [router.params].
using policy_params = std::map<std::string, double>;

struct decision {
  std::optional<std::size_t> index;  // into the replica list; empty: no replica can take it
  std::string why;                   // one line for logs and the admin console
  std::string reason;                // a short, fixed label for counting decisions by kind
};

// A policy: (request, replicas, parameters, how many decisions were made before) -> decision.
// Must be deterministic in its arguments and must not pick a replica with alive == false.
using policy = std::function<decision(const route_request&, std::span<const replica_load>, const policy_params&,
                                      std::uint64_t decision_index)>;

// Built-in and user policies by name. Thread-safe.
class registry {
 public:
  static registry& global();  // holds round_robin and least_loaded from the start

  // Adds or replaces a policy. `params` lists the parameter names it accepts (others are an
  // error when a topology is validated).
  void add(const std::string& name, policy p, std::vector<std::string> params = {});
  bool has(const std::string& name) const;
  // Throws input_error naming the policy and the known ones if absent.
  const policy& get(const std::string& name) const;
  const std::vector<std::string>& params_of(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  struct entry {
    policy fn;
    std::vector<std::string> params;
  };
  std::map<std::string, entry> entries_;
};

// The built-ins, also usable directly.
decision round_robin(const route_request&, std::span<const replica_load>, const policy_params&, std::uint64_t index);
// Lowest running_weight * running_seqs + token_weight * (waiting_prompt_tokens + prompt_tokens);
// defaults 1 and 1/256. Ties go to the lowest replica id.
decision least_loaded(const route_request&, std::span<const replica_load>, const policy_params&, std::uint64_t index);
// Lowest cost, where cost = token_weight * (waiting_prompt_tokens + prompt_tokens -
// prefix_weight * cached tokens) + running_weight * running_seqs + usage_weight * KV usage (0
// to 1): a replica holding the prefix saves its prompt work, weighed against its queue.
// Defaults: prefix_weight 1, token_weight 1/256, running_weight 1, usage_weight 0. While the
// index is incomplete for any live replica, it decides as least_loaded (reason
// "index_incomplete"); otherwise its reason is "prefix_hit" or "no_hit".
decision kv_aware(const route_request&, std::span<const replica_load>, const policy_params&, std::uint64_t index);

}  // namespace troupe::routing
