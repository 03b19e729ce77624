// The admin actor's interface and state (actors/control/admin_actor.h spawns it; the files of
// its commands share the state through actors/control/admin_ops.h).
#pragma once
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/protocol/lora_protocol.h"
#include "actors/protocol/node_protocol.h"
#include "actors/protocol/owner_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/admin/admin_message.h"
#include "runtime/admin/cluster_status.h"
#include "topology/topology.h"

namespace troupe::actors {

using admin_atom = caf::atom_constant<caf::atom("admin")>;

// A command from the endpoint: (its token, the request). The reply goes to admin_config::reply
// with the same token.
// It also takes the router's and the request owner's events (admin_protocol.h).
// For the autoscaler: each pool's signals, and scaling a pool (true once done, else an error).
using admin_actor = caf::typed_actor<caf::reacts_to<admin_atom, std::uint64_t, std::string, std::vector<std::string>>,
                                     caf::reacts_to<tick_atom>, caf::reacts_to<event_atom, admin::replica_changed>,
                                     caf::reacts_to<event_atom, admin::placement_event>,
                                     caf::reacts_to<event_atom, admin::admission_event>,
                                     caf::reacts_to<event_atom, admin::migration_event>,
                                     caf::replies_to<signals_atom, std::chrono::milliseconds>::with<pool_signal_map>,
                                     caf::replies_to<scale_atom, std::string, std::int32_t, std::string>::with<bool>,
                                     caf::reacts_to<autoscaler_atom, autoscaler_actor>>;

struct admin_config {
  topology::topology_config topo;
  router_actor router;
  owner_actor owner;
  node_registry_actor registry;  // for `kill NODE`
  nlohmann::json model;          // the model the head serves, for `topology` (else the topology's path)
  std::string head;              // this head's node name: the owner its rollouts' records name
  lora_serving lora;             // for `lora`
  std::chrono::milliseconds timeout{5000};         // for each question to an actor
  std::chrono::milliseconds drain_timeout{600000};  // how long `drain` waits for the replica
  std::chrono::milliseconds sample_interval{1000};  // load sampling, for tokens/s and events
  std::function<void(std::uint64_t token, admin::reply)> reply;
  std::function<void(const std::string& kind, nlohmann::json fields)> event;
};

struct rollout_run;  // a canary rollout under way (admin_rollout.cpp)

struct admin_state {
  admin_config cfg;
  std::vector<admin::replica_status> replicas;  // indexed by replica id
  std::vector<scheduler_actor> schedulers;      // the live ones' handles, by replica id
  std::map<std::uint32_t, std::string> announced;  // id -> the state `watch` was last told
  std::vector<pool_latency> latency;               // each pool's, from the request owner
  autoscaler_actor autoscaler;                     // if the topology runs one
  std::set<std::string> swapping;                  // pools a `swap` is replacing now (one at a time each)
  // Replicas a swap drains now, by index, with their pool: the drain is undone if no other
  // replica of the pool serves (admin_ops::guard_drains), so the old revision serves on.
  std::map<std::size_t, std::string> guarded_drains;
  std::map<std::string, std::shared_ptr<rollout_run>> rollouts;
  // This process of the head (its start, ns since the epoch): a record of an earlier one is a
  // rollout this head ran before it restarted.
  std::uint64_t start_ns = 0;
  // The splits this head's router follows for rollouts other heads run: by pool, (key, share).
  std::map<std::string, std::pair<std::string, double>> followed;
  // Each pool's revision after its last whole swap or promotion (dir, revision; absent: the
  // model its processes were started with): what a rollout of the pool rolls back to.
  std::map<std::string, std::pair<std::string, std::string>> pool_revisions;  // by pool: under way, or how the last ended
  static inline const char* name = "troupe.admin";
};

}  // namespace troupe::actors
