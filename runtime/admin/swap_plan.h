// A hot swap of a pool's model revision (`swap POOL --model DIR [--revision R]`, docs/admin.md),
// as plain decisions: what the command's arguments say, and which replica to replace next. The
// admin actor loads the revision on the nodes, then asks next_swap_step after every move and
// carries the step out (start, unpark, drain, stop through the node agents).
//
// The rules, so that no request fails and capacity never dips when it need not:
//   - a serving replica of another revision is replaced through a stopped slot of its pool when
//     there is one (the new replica serves before the old one drains), else in place (drained,
//     stopped, started again) when another replica keeps serving meanwhile;
//   - a pool with one serving replica and no stopped slot is refused: draining it would leave
//     its requests nowhere to go (max_replicas > replicas gives a swap its room);
//   - warm replicas of another revision are restarted warm;
//   - a replica is drained only while another of its pool serves: a drain left with nowhere to
//     send its requests is undone (drains_to_undo);
//   - a replica with no load report yet counts as another revision (replacing it is safe);
//     dead and starting ones restart with the new revision (their node agents have it).
#pragma once
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "runtime/admin/cluster_status.h"

namespace troupe::admin {

struct swap_request {
  std::string pool;
  std::string dir;       // the new revision's files (safetensors folder or GGUF file)
  std::string revision;  // its name, part of the cache key; empty: the files' fingerprint alone
};

// POOL --model DIR [--revision R], flags in any order after POOL; or why not.
std::variant<swap_request, std::string> parse_swap(const std::vector<std::string>& args);

struct swap_step {
  enum class kind { done, replace_via_spare, replace_in_place, restart_warm, add_spare, refuse } what = kind::done;
  std::size_t old_replica = 0;  // its index in the replicas: drained and stopped (or restarted warm)
  std::size_t spare = 0;        // replace_via_spare, add_spare: the stopped slot started with the new revision
  std::string why;              // refuse: the reason
};

// The next move of a swap of `pool` to the revision with cache key `key`. With `want` (a canary):
// until that many serving replicas run it, old ones are replaced as above while another old one
// serves on (so the canary's share of replicas follows its share of traffic); the last old one
// stays, and a stopped slot starts the canary beside it (add_spare); warm ones are left alone.
swap_step next_swap_step(const std::vector<replica_status>& replicas, const std::string& pool, const std::string& key, int want = -1);

// Of the replicas a swap is draining (`draining`, indexes), those whose drain must be undone: no
// other replica of their pool serves (the new ones died, or their node's link was cut), so their
// requests would have nowhere to go. The old revision then serves on and the swap step fails.
std::vector<std::size_t> drains_to_undo(const std::vector<replica_status>& replicas, const std::vector<std::size_t>& draining);

}  // namespace troupe::admin
