// A node process: joins every head through CAF's middleman and hosts the replicas the topology
// places on it, registering each with the head's router.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "actors/cluster/node_agent.h"
#include "actors/protocol/node_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "topology/topology.h"

namespace troupe::actors {

struct head_address {
  std::string name, host;
  std::uint16_t port = 0;
};

// Runs node `node` of a topology in this process until it is stopped: joins every head (with
// `credentials`), whose registries have the node agent spawn the node's replicas once and share
// them. A head that goes away leaves the replicas serving the others and is joined again when it
// is back. on_ready(replicas) after the first joins; on_event(text) for each head lost or
// rejoined. Returns within a quarter second of *stop turning true, its replicas stopped (their
// KV freed). Throws input_error when no head can be reached at first, or one refuses the node.
// on_status(word) once a second after that: "joining" while no head is joined, "unresponsive"
// when its replicas do not say what they do, else what supervision::node_readiness says of them
// ("ready", "draining", "parked").
void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::vector<head_address>& heads, std::shared_ptr<const model::llama_model> model,
              std::shared_ptr<const tokenizer::tokenizer> tok, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready, const std::function<void(const std::string&)>& on_event = {},
              const std::atomic<bool>* stop = nullptr, const std::function<void(const std::string&)>& on_status = {});
// The same for a node holding the topology's models by name ("" : [model]).
void run_node(caf::actor_system& sys, const topology::topology_config& topo, const std::string& node,
              const std::vector<head_address>& heads, const loaded_models& models, const join_credentials& credentials,
              const std::function<void(std::size_t)>& on_ready, const std::function<void(const std::string&)>& on_event = {},
              const std::atomic<bool>* stop = nullptr, const std::function<void(const std::string&)>& on_status = {});

}  // namespace troupe::actors
