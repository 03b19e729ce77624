// The node agent of a process and the head's node registry.
//
// A node joins by sending its agent to the registry; the registry asks the agent to spawn each
// replica the topology places on that node and registers the replicas with the router.
#pragma once
#include <functional>
#include <vector>
#include <map>
#include <set>
#include <optional>

#include "actors/protocol/node_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "actors/serving/worker_group.h"
#include "runtime/common/constant_time.h"
#include "runtime/engine/engine.h"
#include "runtime/supervision/restart_policy.h"
#include "topology/topology.h"

namespace troupe::actors {


// Where this process's worker groups place ranks the topology puts on other nodes (pools'
// rank_nodes): this process's node and the directory of the nodes' agents (node_directory).
// Without one, every rank of a group runs in its replica's process (one process hosts all).
struct rank_placement {
  std::string node;
  caf::actor hosts;
};

// A model this process loaded: its weights and tokenizer (both null in a sim topology).
struct loaded_model {
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<const tokenizer::tokenizer> tok;
};
// By the topology's model name ("" : [model]): a process loads the models its replicas serve.
using loaded_models = std::map<std::string, loaded_model>;

// Another revision of a model, loaded for a swap (revision_spec): its weights and tokenizer
// (null in a sim topology) and the key its replicas' caches are rooted in.
struct model_revision {
  loaded_model weights;
  std::string key;
};

// How this process starts replicas.
struct replica_factory {
  // Starts replica R's scheduler here (a cpu replica with its worker group and the node's KV
  // store, or a sim replica), running `revision` instead of the topology's model when given;
  // throws input_error when it cannot.
  std::function<scheduler_actor(caf::actor_system&, replica_id, const model_revision*)> start;
  // Reads a revision's files; throws input_error naming what was wrong (unreadable, another
  // architecture or tokenizer than the model it replaces). Null: this process loads none.
  std::function<model_revision(const revision_spec&)> load_revision;
};
// Each model's KV store in this process (with [kv_store]), by the same names.
using model_stores = std::map<std::string, kv_store_actor>;

// The factory of a process holding `models` (cpu; a replica of a model not loaded here is
// refused by name) or of a sim topology.
replica_factory replica_factory_of(const topology::topology_config& topo, const loaded_models& models, const model_stores& stores,
                                   std::optional<rank_placement> ranks = std::nullopt);
// The same for a process holding [model] alone.
replica_factory replica_factory_of(const topology::topology_config& topo, std::shared_ptr<const model::llama_model> model,
                                   std::shared_ptr<const tokenizer::tokenizer> tok, kv_store_actor store,
                                   std::optional<rank_placement> ranks = std::nullopt);

struct node_agent_state {
  std::string node;
  replica_factory make;
  std::string model_dir;
  // The replicas it started and that still run (shared with its exit functor).
  std::shared_ptr<std::map<replica_id, scheduler_actor>> live = std::make_shared<std::map<replica_id, scheduler_actor>>();
  std::vector<caf::actor> heads;  // the registries of the heads joined now (node_registry_actor)
  // The revision each replica starts with instead of the topology's model (a swap's), shared by
  // the replicas of a pool; restarts keep it.
  std::map<replica_id, std::shared_ptr<const model_revision>> revisions;
  // A replica that dies (not one stopped on request) is restarted after a backoff, as an OTP
  // supervisor would, until it dies more often than the policy allows.
  supervision::restart_policy restarts;
  std::map<replica_id, supervision::restart_history> history;
  std::map<std::string, std::string> rollout_records;  // by pool: the latest a head sent
  static inline const char* name = "troupe.node_agent";
};

// The agent monitors its replicas and restarts one that dies (its requests have moved on; the
// heads register the new one), with backoff and a restart intensity (runtime/supervision); it
// logs when it gives up on one. It stops them when it exits itself.
node_agent_actor::behavior_type node_agent(node_agent_actor::stateful_pointer<node_agent_state> self, std::string node,
                                           replica_factory make, std::string model_dir);

struct node_registry_state {
  topology::topology_config topo;
  router_actor router;
  std::optional<join_credentials> credentials;  // none yet: every join is refused
  std::map<std::string, caf::actor_addr> joined;  // node name -> its agent, while alive
  std::map<std::string, node_agent_actor> local;  // the agents of the nodes hosted in the head's process
  std::uint64_t generation = 0;                   // this head's start (see join_reply)
  caf::actor directory;  // told of every node that joins (node_directory), for groups' ranks
  // Replicas started past the topology's own (a scale-up, here or at another head) and those
  // stopped on purpose (a scale-down): what a node that joins again must run is the topology's
  // started replicas less the retired, plus the scaled up.
  std::set<replica_id> scaled_up, retired;
  static inline const char* name = "troupe.node_registry";
};

// `local`: the agents in the head's own process, by the node they host (a node that joins
// brings its own).
node_registry_actor::behavior_type node_registry(node_registry_actor::stateful_pointer<node_registry_state> self,
                                                 topology::topology_config topo, router_actor router,
                                                 std::map<std::string, node_agent_actor> local, caf::actor directory);

}  // namespace troupe::actors
