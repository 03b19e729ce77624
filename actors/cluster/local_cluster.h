// The embedding API: start a topology's actors inside the caller's own CAF actor system and get
// the handles to submit requests and receive tokens. `local_cluster` is the head of a
// topology: router and request owner, plus the replicas placed here. In the single-process
// form every replica runs here, whatever node it names; in the distributed form only the head
// node's replicas do, and the other nodes' replicas register over the network (run_node).
#pragma once
#include <memory>
#include <vector>

#include "actors/cluster/node_agent.h"
#include "actors/protocol/lora_protocol.h"
#include "actors/protocol/node_protocol.h"
#include "actors/protocol/owner_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "actors/protocol/store_protocol.h"
#include "actors/serving/worker_group.h"
#include "runtime/engine/engine.h"
#include "runtime/api/lora_catalog.h"
#include "runtime/model/llama_model.h"
#include "runtime/sim/cost_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "topology/engine_settings.h"
#include "topology/topology.h"

namespace troupe::actors {

// Adds every Troupe message type to a config; call once, before the actor system starts.
void register_protocols(caf::actor_system_config& cfg);

// How CAF's idle worker threads wait for work: a short spin, then asleep until a message arrives
// (or 1 ms passes, to steal queued work from a busy worker). CAF's default polls every 50 us
// for 25 ms after each job; a replica's forward runs on a worker for tens of milliseconds while
// the other workers so woke ~20,000 times a second, each wake-up a context switch on the cores
// the forward's threads need (on 2 cores a 1b model's decode step took 70 ms served against 45 ms
// in `troupe bench engine`). Call before the actor system starts.
void configure_workers(caf::actor_system_config& cfg);

// Loads CAF's middleman with the topology's heartbeat and connection timeout, without which a
// cut link is never noticed, and CAF's OpenSSL module with the cluster's certificates when it
// has them (then every link checks the peer's certificate against tls_ca, both ways). Call
// before the actor system starts.
void configure_network(caf::actor_system_config& cfg, const topology::timeouts_spec& t,
                       const topology::cluster_spec& cluster = {});

// The node registry at host:port, over TLS when `tls`; throws input_error naming the address.
node_registry_actor connect_registry(caf::actor_system& sys, const std::string& host, std::uint16_t port, bool tls);

// Waits until each replica answers (its engine and KV are allocated); throws input_error naming
// the replica and the reason when one died starting, so the process ends instead of serving 503.
void await_started(caf::actor_system& sys, const std::vector<scheduler_actor>& replicas, std::chrono::milliseconds timeout);

enum class placement_mode { all_here, head_node_only };

class local_cluster {
 public:
  // Spawns one scheduler per replica of every pool, a router with the topology's policy and a
  // request owner. Throws input_error for a backend this form cannot run (sim, cuda).
  // With head_node_only, `model` may be null when the head node hosts no replica.
  local_cluster(caf::actor_system& sys, const topology::topology_config& topo,
                std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok,
                placement_mode mode = placement_mode::all_here, const std::string& head = "");
  // The same with the topology's models ([model] and [models.NAME]) by name: the replicas placed
  // here of a model not in `models` are refused by name.
  local_cluster(caf::actor_system& sys, const topology::topology_config& topo, const loaded_models& models,
                placement_mode mode = placement_mode::all_here, const std::string& head = "");
  // Stops every actor it spawned.
  ~local_cluster();
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  // Where clients submit: submit_atom + engine::request + a token_sink.
  owner_actor owner() const { return owner_; }
  router_actor router() const { return router_; }
  kv_store_actor store() const { return store(""); }  // [model]'s; null without [kv_store]
  kv_store_actor store(const std::string& model) const {
    auto it = stores_.find(model);
    return it == stores_.end() ? kv_store_actor{} : it->second;
  }
  node_registry_actor registry() const { return registry_; }
  // LoRA adapters served here by name (the topology's, and those loaded at run time), and who
  // loads and unloads them across the replicas ([lora]; both null without it).
  std::shared_ptr<const api::lora_catalog> loras() const { return loras_; }
  lora_manager_actor lora_manager() const { return lora_manager_; }
  // The replicas hosted here as started with the cluster, by replica id (null: a slot stopped at
  // start, or placed on another node).
  const std::vector<scheduler_actor>& schedulers() const { return schedulers_; }

  // Fault injection: kills replica i's scheduler as if its process died.
  void kill_replica(std::size_t i);
  // Kills rank `rank` of replica i's worker group (the group restarts as a whole).
  void kill_worker(std::size_t i, std::size_t rank);
  // Makes rank `rank` (stage-major) of replica i's group die inside its `calls`-th collective
  // from now, while the other ranks of its stage wait in it (a rank without collectives dies at
  // once).
  void kill_worker_in_collective(std::size_t i, std::size_t rank, int calls);
  // The same, but the rank's whole process dies there (SIGKILL): for a rank the topology placed
  // on another node (pools' rank_nodes), that node's process.
  void crash_rank_process_in_collective(std::size_t i, std::size_t rank, int calls);
  // Replica i's ranks now, stage by stage (null: starting on another node).
  std::vector<worker_actor> ranks_of(std::size_t i);
  // Kills replica i's group supervisor (the whole group, and with it the replica).
  void kill_group(std::size_t i);
  // Drains replica i: the router places nothing more on it and it hands every request it holds,
  // with the KV computed so far, to other replicas. Returns at once; replica i's load report says
  // when it is drained.
  void drain_replica(std::size_t i);
  // Replica i's worker group as it is now.
  group_status group_of(std::size_t i);

  // Makes the head's node registry reachable for other nodes at host:port (0: any free port),
  // over TLS when `tls`: a node joins with its agent and `admit`'s credentials, and the registry
  // has the agent spawn that node's replicas. Returns the port, or throws input_error naming
  // the address when it cannot listen.
  std::uint16_t publish(const std::string& host, std::uint16_t port, bool tls = false);
  // The token and model fingerprint a join must carry; no node joins before this.
  void admit(join_credentials credentials);

  // Replicas the router can place on now.
  std::uint32_t live_replicas();

 private:
  void start(const topology::topology_config& topo, const loaded_models& models, placement_mode mode);
  void start_stores(const topology::topology_config& topo, const loaded_models& models, placement_mode mode);
  void stop();  // asks every actor it spawned to exit

  caf::actor_system& sys_;
  std::string head_;  // the head this process is (head_node_only hosts this node's replicas)
  std::vector<scheduler_actor> schedulers_;
  router_actor router_;
  owner_actor owner_;
  node_registry_actor registry_;
  node_agent_actor agent_;  // starts and stops the replicas hosted in this process
  caf::actor directory_;    // the joined nodes' agents, for ranks placed on them (node_directory)
  model_stores stores_;  // this process's, one per model it hosts, with [kv_store]
  std::shared_ptr<api::lora_catalog> loras_;
  lora_manager_actor lora_manager_;
};

}  // namespace troupe::actors
