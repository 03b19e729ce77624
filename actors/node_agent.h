// The node agent of a process and the head's node registry.
//
// A node joins by sending its agent to the registry; the registry asks the agent to spawn each
// replica the topology places on that node and registers the replicas with the router.
#pragma once
#include <map>

#include "actors/protocol/node_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "actors/worker_group.h"
#include "runtime/common/constant_time.h"
#include "runtime/engine/engine.h"
#include "topology/topology.h"

namespace troupe::actors {

struct node_agent_state {
  std::string node;
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<const tokenizer::tokenizer> tok;
  engine::engine_config engine;
  std::vector<group_config> groups;  // worker group of each replica of the topology, by id
  std::string model_dir;
  std::map<replica_id, scheduler_actor> replicas;
  kv_store_actor store;  // the node's, handed to every replica spawned here
  static inline const char* name = "troupe.node_agent";
};

node_agent_actor::behavior_type node_agent(node_agent_actor::stateful_pointer<node_agent_state> self, std::string node,
                                           std::shared_ptr<const model::llama_model> model,
                                           std::shared_ptr<const tokenizer::tokenizer> tok, engine::engine_config cfg,
                                           std::vector<group_config> groups,
                                           std::string model_dir, kv_store_actor store = {});

struct node_registry_state {
  topology::topology_config topo;
  router_actor router;
  std::optional<join_credentials> credentials;  // none yet: every join is refused
  std::map<std::string, caf::actor_addr> joined;  // node name -> its agent, while alive
  std::uint64_t generation = 0;                   // this head's start (see join_reply)
  static inline const char* name = "troupe.node_registry";
};

node_registry_actor::behavior_type node_registry(node_registry_actor::stateful_pointer<node_registry_state> self,
                                                 topology::topology_config topo, router_actor router);

}  // namespace troupe::actors
