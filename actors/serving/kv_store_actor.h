// A node's KV store as an actor: host memory (a shared-memory kv_cache of its own, exposed for
// pulls like a replica's) holding prefix blocks the node's replicas let go of, found by hash
// (runtime/kv/kv_store.h). It runs on its own thread (spawned detached), so copying blocks in
// never takes a thread from the replicas' steps; the replicas pin what they offer until it
// answers. Any replica of the cluster can pull a prefix it holds: in-process, by shared memory on
// this host, or over TCP from elsewhere.
#pragma once
#include <map>
#include <memory>
#include <unordered_map>

#include "actors/protocol/store_protocol.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/kv/kv_store.h"
#include "runtime/kv/connector.h"
#include "runtime/engine/engine.h"
#include "topology/topology.h"

namespace troupe::actors {

struct kv_store_config {
  kv::transfer::kv_layout layout;  // the replicas' (one rank over every layer here)
  std::size_t capacity_bytes = 0;
  replica_id id;                    // its id in KV events (store_id_base + node index)
  std::chrono::milliseconds hold{60000};  // how long a lookup's blocks stay pinned unclaimed
  // A second tier in a file: blocks memory has no room for go there (least recently used first)
  // and come back to memory when looked up. The file is made in `disk_dir` and unlinked at once.
  std::string disk_dir;
  std::size_t disk_bytes = 0;
};

struct kv_store_state {
  kv_store_config cfg;
  std::unique_ptr<kv::kv_store_index> index;  // host memory: slot = block of `cache`
  std::unique_ptr<kv::kv_store_index> disk;   // the file's slots, when there is one
  int disk_fd = -1;
  struct block_meta {  // what a stored block's events say of it
    kv::block_hash parent = 0;
    bool has_parent = false;
    std::vector<std::int32_t> tokens;
  };
  std::unordered_map<kv::block_hash, block_meta> meta;  // every block held, in either tier
  std::shared_ptr<kv::kv_cache> cache;
  kv::transfer::kv_source source;
  // The slots a lookup pinned for request R, until R's replica releases them or the hold expires.
  std::map<std::string, std::vector<std::int32_t>> pins;
  // Their holds, as a sender's side of the KV connector (a store hit is one of its uses).
  kv::connector::scheduler_side<caf::actor> holds;
  std::vector<kv_event_sink> sinks;
  std::uint64_t generation = 0, seq = 0;
  store_report stats;
  ~kv_store_state();
  static inline const char* name = "troupe.kv_store";
};

kv_store_actor::behavior_type kv_store(kv_store_actor::stateful_pointer<kv_store_state> self, kv_store_config cfg);

// The id node `node`'s KV store of model `model` ("" : [model]) has in KV events and the router:
// a process keeps one store per model it serves, each in that model's layout.
replica_id store_id_of(const topology::topology_config& topo, const std::string& node, const std::string& model = "");

// This process's KV store for the replicas of `ec` (its served_model) when the topology has
// [kv_store] (null otherwise): spawned on a thread of its own, in their layout, with its id for
// node `node` of the topology.
kv_store_actor spawn_kv_store(caf::actor_system& sys, const topology::topology_config& topo, const engine::engine_config& ec,
                              const model::model_config& m, const std::string& node);

}  // namespace troupe::actors
