// A node process: joins the head through CAF's middleman and hosts the replicas the topology
// places on it, registering each with the head's router.
#pragma once
#include <functional>
#include <string>

#include "actors/protocol/node_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "topology/topology.h"

namespace troupe::actors {

// Connects to the head's node registry at head_host:head_port and joins with this process's
// node agent, which spawns the replicas the head places here; blocks until the head goes away
// (returns normally). Throws input_error naming the address when the head cannot be reached or
// refuses the node. `on_ready` is called once the replicas are registered, with their count.
void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::string& head_host, std::uint16_t head_port, std::shared_ptr<const model::llama_model> model,
              std::shared_ptr<const tokenizer::tokenizer> tok, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready);

}  // namespace troupe::actors
