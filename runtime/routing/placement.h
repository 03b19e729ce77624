// Where the router places one request: the pure decision behind router_actor's route handler.
// Given what the router knows (the replicas' loads and roles, which are held back, the prefix
// index and the KV stores), it picks a replica with the configured policy, says whether the
// request goes to a prefill replica first (disaggregation.h), and names a store that holds more
// of its prefix than the chosen replica. The actor only turns slots into actor handles.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/common/ids.h"
#include "runtime/kv/block_hash.h"
#include "runtime/routing/canary_split.h"
#include "runtime/routing/disaggregation.h"
#include "runtime/routing/policy.h"
#include "runtime/routing/prefix_index.h"

namespace troupe::routing {

// A pool's part in disaggregated serving: prefill replicas hand requests off after their first
// token; decode replicas take handed-off requests and new ones; both do everything.
enum class replica_role : std::uint8_t { prefill, decode, both };

// What the router knows when it places, borrowed for one decision.
struct placement_context {
  std::span<const replica_load> loads;               // slot i: replica loads[i].replica
  const std::map<replica_id, replica_role>* roles;   // absent: both; empty: no disaggregation
  // Replica and store ids -> the model they serve (absent: the default ""); null: one model.
  const std::map<replica_id, std::string>* models = nullptr;
  std::function<bool(replica_id)> held_back;         // draining or parked: placed on by nobody
  bool any_held_back = false;                        // whether held_back can be true for any
  const prefix_index* index = nullptr;               // the replicas' and stores' blocks
  bool kv_aware = false;                             // the policy reads the index
  std::vector<replica_id> stores;                    // the KV stores the index follows
  const policy* choose = nullptr;
  const policy_params* params = nullptr;
  std::uint64_t decision_index = 0;
  int block_size = 16;
  disaggregation_params disaggregation;
  // A canary rollout: each replica's cache key (which revision it runs; absent: unknown, the
  // baseline's side) and the split of the request's model. Null: no split.
  const std::map<replica_id, std::string>* revisions = nullptr;
  const canary_split* split = nullptr;
};

// One request as the router sees it. `hashes`: its prompt's full blocks (prompt_block_hashes),
// needed only when the context is KV-aware or has stores.
struct placement_query {
  int prompt_tokens = 0;
  int priority = 0;
  replica_id avoid{UINT32_MAX};  // the replica a request just left (none: no replica's id)
  bool decode = false;            // handed off after its prefill: not to a prefill replica
  std::vector<kv::block_hash> hashes;
  std::string model;  // only replicas (and stores) of this model take it (placement_context::models)
  // With a split: whether the request's sender is on the canary's side (canary_side). It goes to
  // that side's replicas, or to the other side's when none of them can take it.
  std::optional<bool> canary;
};

struct placement {
  std::optional<std::size_t> slot;  // the chosen replica's slot; none: nothing could take it
  bool prefill_only = false;        // the slot is a prefill replica: it hands the request off
  std::string why;                  // the policy's reason, or why nothing could be placed
  std::string reason;               // the policy's short label, for counting decisions
  int cached_tokens = 0;            // of the prompt, held by the chosen replica as far as the index knows
  std::optional<replica_id> store;  // a store holding more of the prefix, in the replica's KV dtype
  int store_blocks = 0;             // how many of `hashes` it holds
};

// The hashes that key a prompt's full blocks in the replicas' prefix caches (root from the model
// key, salt from the tenant), without a full last block: its last token is always computed.
std::vector<kv::block_hash> prompt_block_hashes(const std::vector<std::int32_t>& tokens, int block_size, kv::block_hash root,
                                                const std::string& cache_salt, int public_prefix);

placement place(const placement_context& c, const placement_query& q);

// Counts a placement in the chosen replica's load right away, so that a burst between two load
// reports spreads out: one more running sequence, and its uncached prompt tokens queued.
void count_placement(replica_load& l, int prompt_tokens, int cached_tokens);

}  // namespace troupe::routing
