// Between the head and the node agent of each process: the head decides what runs where, the
// agent spawns and stops it and reports what the process has.
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"

namespace troupe::actors {

struct node_resources {
  std::string node;
  std::int32_t cores = 0;
  std::uint64_t memory_total = 0;      // bytes
  std::uint64_t memory_available = 0;  // bytes
  std::string model;                   // the model folder the node serves
  std::vector<std::uint32_t> replicas; // running here now
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_resources& x) {
  return f(caf::meta::type_name("node_resources"), x.node, x.cores, x.memory_total, x.memory_available, x.model,
           x.replicas);
}

using spawn_replica_atom = caf::atom_constant<caf::atom("spawnrep")>;
using stop_replica_atom = caf::atom_constant<caf::atom("stoprep")>;
using resources_atom = caf::atom_constant<caf::atom("resources")>;
using join_atom = caf::atom_constant<caf::atom("join")>;

// One per process.
using node_agent_actor = caf::typed_actor<
    // Start replica R's scheduler here; replies with its handle.
    caf::replies_to<spawn_replica_atom, std::uint32_t>::with<scheduler_actor>,
    // Stop replica R (its requests migrate like after a crash). Replies false if not here.
    caf::replies_to<stop_replica_atom, std::uint32_t>::with<bool>,
    // What this process has.
    caf::replies_to<resources_atom>::with<node_resources>>;

// On the head: where node agents join. Replies with how many replicas it placed on the node.
using node_registry_actor = caf::typed_actor<caf::replies_to<join_atom, std::string, node_agent_actor>::with<std::uint32_t>>;

void register_node_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
