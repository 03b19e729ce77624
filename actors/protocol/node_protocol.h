// Between the head and the node agent of each process: the head decides what runs where, the
// agent spawns and stops it and reports what the process has.
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"
#include "actors/protocol/store_protocol.h"
#include "actors/protocol/worker_protocol.h"

namespace troupe::actors {

struct node_resources {
  std::string node;
  std::int32_t cores = 0;
  std::uint64_t memory_total = 0;      // bytes
  std::uint64_t memory_available = 0;  // bytes
  std::string model;                   // the model folder the node serves
  std::vector<replica_id> replicas;    // running here now
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
using admit_atom = caf::atom_constant<caf::atom("admit")>;
using crash_atom = caf::atom_constant<caf::atom("crash")>;
using heads_atom = caf::atom_constant<caf::atom("heads")>;
using log_level_atom = caf::atom_constant<caf::atom("loglevel")>;
using rank_atom = caf::atom_constant<caf::atom("rank")>;
using respawn_atom = caf::atom_constant<caf::atom("respawn")>;
using revision_atom = caf::atom_constant<caf::atom("revision")>;
using rollout_record_atom = caf::atom_constant<caf::atom("rollrec")>;

// Another revision of a pool's model (`troupe admin swap`): the files in `dir` (the same
// architecture family and tokenizer), named `revision`. Replicas of `pool` (`replicas`, filled in
// by the head's registry) start with it from then on, in every process that hosts one.
struct revision_spec {
  std::string pool;
  std::string model;  // the topology's name for the pool's model ("" : [model])
  std::string dir;
  std::string revision;
  std::vector<replica_id> replicas;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, revision_spec& x) {
  return f(caf::meta::type_name("revision_spec"), x.pool, x.model, x.dir, x.revision, x.replicas);
}

// One per process.
using node_agent_actor = caf::typed_actor<
    // Start replica R's scheduler here; replies with its handle.
    caf::replies_to<spawn_replica_atom, replica_id>::with<scheduler_actor>,
    // Stop replica R (its requests migrate like after a crash). Replies false if not here.
    caf::replies_to<stop_replica_atom, replica_id>::with<bool>,
    // What this process has.
    caf::replies_to<resources_atom>::with<node_resources>,
    // Fault injection (the admin console's `kill NODE`): the process dies at once, SIGKILL.
    caf::reacts_to<crash_atom>,
    // The node registries of the heads this node has joined now (node_registry_actor handles):
    // a replica started or stopped at one head's request is announced to the others, so every
    // head's router knows it.
    caf::reacts_to<heads_atom, std::vector<caf::actor>>,
    // Log at this level from now on (debug, info, warn, error, off; the admin console's
    // `log-level`); anything else is ignored.
    caf::reacts_to<log_level_atom, std::string>,
    // Start one rank of a worker group whose supervisor is in another process (the group's
    // rank_nodes place it here); replies with the rank and where its KV can be pulled from.
    caf::replies_to<rank_atom, rank_spec>::with<rank_started>,
    // The agent's own timer: restart replica R, which died (its supervision's backoff is over).
    caf::reacts_to<respawn_atom, replica_id>,
    // Load another revision of a pool's model; replicas of the pool start with it from now on
    // (restarts included). Replies with its cache key ("<fingerprint>@<revision>"), or an error
    // naming what was wrong (unreadable files, another tokenizer).
    caf::replies_to<revision_atom, revision_spec>::with<std::string>,
    // Keep the latest record of POOL's rollout (runtime/admin/rollout_record.h, as JSON text) for
    // whichever head needs it: the head running a rollout outlives nothing, the nodes do. Up to
    // 64 pools, 64 KiB each; beyond, nothing is kept.
    caf::reacts_to<rollout_record_atom, std::string, std::string>,
    // The records kept here.
    caf::replies_to<rollout_record_atom>::with<std::vector<std::string>>,
    // The load of each replica running here (those that do not answer within 5 s left out): a
    // node's readiness (troupe node --status-file) is whether any of them serves.
    caf::replies_to<load_atom>::with<std::vector<load_report>>>;

// A node asking to serve: its name in the topology, its agent, and its credentials.
struct join_request {
  std::string node;
  node_agent_actor agent;
  std::string token;        // the cluster token
  std::string fingerprint;  // of the model the node loaded (model::model_fingerprint)
  // The node's KV stores, if the topology has them: one per model, by its index in
  // topology_config::models() (null for a model the node hosts no replica of).
  std::vector<kv_store_actor> stores;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_request& x) {
  return f(caf::meta::type_name("join_request"), x.node, x.agent, x.token, x.fingerprint, x.stores);
}

// A head's answer to a join: the replicas it placed, and its generation, which grows with each
// start of a head, so a node never goes back to an older process of a head it has seen
// restarted (one cut off and healed after its successor took over).
struct join_reply {
  std::uint32_t placed = 0;
  std::uint64_t generation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_reply& x) {
  return f(caf::meta::type_name("join_reply"), x.placed, x.generation);
}

// What a join must carry; set on the head before nodes may join.
struct join_credentials {
  std::string token;
  std::string fingerprint;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_credentials& x) {
  return f(caf::meta::type_name("join_credentials"), x.token, x.fingerprint);
}

// On the head: where node agents join. A join is refused (with the reason) until admit has set
// the credentials, with the wrong token or model, for the head's own node, a node the topology
// does not name, or a node already joined and alive.
using node_registry_actor = caf::typed_actor<caf::replies_to<join_atom, join_request>::with<join_reply>,
                                             caf::reacts_to<admit_atom, join_credentials>,
                                             // Kill node N's process (true once told; an error if it has not joined).
                                             caf::replies_to<crash_atom, std::string>::with<bool>,
                                             // Start replica R through its node's agent and register it with the
                                             // router, parked (warm); true once it can be unparked.
                                             caf::replies_to<spawn_replica_atom, replica_id>::with<bool>,
                                             // Stop replica R (drained first, by the caller): the router forgets
                                             // it, then its node's agent stops it and frees its memory.
                                             caf::replies_to<stop_replica_atom, replica_id>::with<bool>,
                                             // From a node agent: replica R started (or stops) at another head's
                                             // request; this head's router registers (or retires) it.
                                             caf::reacts_to<replica_atom, replica_id, scheduler_actor>,
                                             caf::reacts_to<retire_atom, replica_id>,
                                             // Every joined node logs at this level; replies how many were told.
                                             caf::replies_to<log_level_atom, std::string>::with<std::uint32_t>,
                                             // Every process hosting a replica of the pool loads the revision
                                             // (revision_spec::replicas filled in here); replies with its key.
                                             caf::replies_to<revision_atom, revision_spec>::with<std::string>,
                                             // A rollout's record (pool, JSON text) to every joined node.
                                             caf::reacts_to<rollout_record_atom, std::string, std::string>,
                                             // Every joined node's records (some copies older than others).
                                             caf::replies_to<rollout_record_atom>::with<std::vector<std::string>>>;

void register_node_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
