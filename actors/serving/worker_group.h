// A replica's executor: worker ranks under a group supervisor that restarts them as a whole.
// The ranks form a grid: `pipeline_ranks` stages, each over a contiguous range of layers, and
// within a stage `tensor_ranks` ranks, each holding its shard of every matrix and its share of
// the KV heads (runtime/model/tensor_shard.h), joined by a collectives group of their own. The
// supervisor is the group's conductor: it cuts each step into micro-batches and moves them
// through the stages (actors/protocol/worker_protocol.h).
//
// Ranks may live on other nodes (group_config::rank_nodes): the supervisor asks the node's
// agent to start them (rank_spec), and a stage whose ranks are not all in this process joins
// its collectives over Gloo, meeting through a rendezvous the supervisor serves per generation
// (actors/cluster/rendezvous.h). Hidden states go between stages as actor messages, wherever they are.
//
// Supervision: any rank's death, a failed collective or a step past its deadline stops every
// rank (aborting the collectives first, so a rank waiting in one wakes with an error instead of
// hanging) and starts the next generation of ranks and collectives with empty KV; the scheduler
// then recomputes what the lost KV held, so requests continue with the same tokens.
#pragma once
#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "actors/protocol/worker_protocol.h"
#include "runtime/collectives/fault.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/micro_batch.h"
#include "runtime/model/llama_model.h"
#include "topology/topology.h"

namespace troupe::actors {

struct group_config {
  int pipeline_ranks = 1;  // stages; layers are split evenly over them, in order
  int tensor_ranks = 1;    // ranks per stage, each with a shard of the weights and KV heads
  bool expert_parallel = false;  // the ranks hold whole experts and dispatch tokens (tensor_shard.h)
  int micro_batches = 1;   // a step is cut into at most this many (1: stages run in turn)
  int max_restarts = 3;    // restarts allowed within restart_window before the group gives up
  std::chrono::milliseconds restart_window{60000};
  std::chrono::milliseconds step_timeout{120000};  // a step slower than this restarts the group
  // Where each rank runs (stage by stage, tensor ranks in order), by node name: `node` (this
  // process) or another node, whose agent `hosts` finds (node_directory). Empty: all here.
  std::vector<std::string> rank_nodes;
  std::string node;
  caf::actor hosts;
  std::string name = "group";  // names the group's collectives (the replica's name)
};

using agent_atom = caf::atom_constant<caf::atom("agent")>;

// The worker group of each replica of a topology, indexed by replica id.
std::vector<group_config> group_configs_of(const topology::topology_config& topo);

// Layers [first, last) of stage r of n, for a model of `layers` layers.
std::pair<int, int> rank_layers(int layers, int r, int n);
// The stages a group of `cfg` has for a model of `layers` layers: at least 1, at most one a layer.
inline int group_ranks(const group_config& cfg, int layers) { return std::max(1, std::min(cfg.pipeline_ranks, layers)); }

struct worker_state {
  std::shared_ptr<const model::llama_model> model;  // this rank's shard (the whole model at tensor_ranks 1)
  std::shared_ptr<kv::kv_cache> cache;  // this rank's layers and heads only (made and exposed by the group)
  std::shared_ptr<collectives::fault_injector> tp;  // the stage's collectives; null at tensor_ranks 1
  model::forward_workspace ws;
  std::vector<float> logits;  // the last stage's, reused every step
  int first = 0, last = 0;
  bool last_stage = false;
  static inline const char* name = "troupe.worker";
};

// Connects a rank's collectives, on the rank's own thread (it may block until the group's other
// ranks come); null at tensor_ranks 1.
using connect_fn = std::function<std::shared_ptr<collectives::communicator>()>;

// Tensor rank `tp->rank()` (or the only rank) of the stage over layers [first, last), with
// `cache` holding exactly those layers of its heads; `tp` gets the communicator `connect` makes.
// The rank ends when `supervisor` does, or when its connect fails.
worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, std::shared_ptr<kv::kv_cache> cache,
                                   int first, int last, bool last_stage, std::shared_ptr<collectives::fault_injector> tp,
                                   connect_fn connect, caf::actor supervisor);

// Starts the rank `spec` describes in this process, unmonitored: its cache (exposed for pulls,
// over TCP too when `over_tcp`), and the worker, which connects its stage's collectives through
// `comm` when given (ranks of one process), else through spec.rendezvous (Gloo). `tp` is the
// rank's fault injector (null at one rank a stage).
struct local_rank {
  rank_started started;
  std::shared_ptr<kv::kv_cache> cache;
};
local_rank start_rank(caf::actor_system& sys, const rank_spec& spec, std::shared_ptr<const model::llama_model> shard,
                      std::shared_ptr<collectives::fault_injector> tp, std::shared_ptr<collectives::communicator> comm,
                      bool over_tcp);

// Which node agent serves each node name that has joined: the supervisors of groups with ranks
// on other nodes ask it (agent_atom, node) and are answered once that node is there.
struct node_directory_state {
  std::map<std::string, caf::actor> agents;
  std::map<std::string, std::vector<caf::response_promise>> waiting;
  static inline const char* name = "troupe.node_directory";
};
// (agent_atom, node) -> caf::actor (a node_agent_actor); (agent_atom, node, agent) registers one.
caf::behavior node_directory(caf::stateful_actor<node_directory_state>* self);

// The step the supervisor is conducting.
struct running_step {
  std::uint64_t id = 0;
  std::uint64_t generation = 0;  // of the ranks it runs on
  caf::typed_response_promise<engine::step_result> promise;
  std::vector<engine::micro_batch> micro;
  std::vector<sampling::sampled_token> tokens;  // the step's, in its logit_rows order
  std::size_t left = 0;                         // micro-batches not through the last stage yet
  std::vector<std::uint64_t> expert_tokens;     // summed over its stages and micro-batches
  std::vector<std::vector<float>> pooled;        // the step's, in its pools order
  std::chrono::steady_clock::time_point started;
};

struct group_state {
  std::shared_ptr<const model::llama_model> model;  // the whole model (its config)
  std::map<int, std::shared_ptr<const model::llama_model>> shards;  // by tensor rank, those with ranks here
  kv::kv_cache_config cache;
  group_config cfg;
  std::vector<worker_actor> ranks;  // rank (s, t) at s * tensor_ranks + t; null while starting elsewhere
  std::vector<std::shared_ptr<collectives::fault_injector>> comms;  // this process's ranks'; empty at tensor_ranks 1
  // The caches of this process's ranks, by rank index, and where other replicas pull every
  // rank's from, this generation; the scheduler is told the sources once all ranks are up,
  // and they are withdrawn when the ranks go.
  std::map<std::size_t, std::shared_ptr<kv::kv_cache>> caches;
  std::vector<kv::transfer::kv_source> sources;
  std::size_t starting = 0;  // ranks being started on other nodes, this generation
  // A start asked of a node's agent, not answered yet. The agent is monitored meanwhile: a node
  // that dies after the directory named its agent would leave the request unanswered until its
  // deadline, so its death asks the directory again (which waits for the node's return).
  struct remote_start {
    caf::actor_addr agent;
    std::size_t rank = 0;
    rank_spec spec;
    int tries = 0;
  };
  std::map<std::uint64_t, remote_start> asked;  // by ask, this generation
  std::uint64_t next_ask = 0;
  caf::actor rendezvous;     // this generation's, when a stage spans processes
  // A step that came while ranks were starting: it runs once they are all up.
  std::optional<std::pair<stage_input, caf::typed_response_promise<engine::step_result>>> queued;
  caf::actor scheduler;
  ~group_state();
  std::set<caf::actor_addr> retired;  // ranks of earlier generations not yet ended
  std::vector<caf::typed_response_promise<group_status>> waiting_ready;  // until `retired` is empty
  std::uint64_t generation = 0;
  std::uint32_t restarts = 0;
  std::deque<std::chrono::steady_clock::time_point> recent;  // restart times inside the window
  std::optional<running_step> step;
  bool kv_lost = false;  // restarted between steps: the next step fails so the scheduler recomputes
  std::uint64_t next_step = 0;
  static inline const char* name = "troupe.group_supervisor";
};

// Spawns the ranks over the model's layers (tensor shards loaded from model->dir(), shared with
// other groups of this process), each with a fresh cache of the geometry `cache` (in shared
// memory when cache.shared) exposed for pulls, tells `scheduler` where the caches can be pulled
// from (kv_sources_atom), and restarts the ranks as a whole on any failure, at most
// cfg.max_restarts times per cfg.restart_window; past that it exits with an error. It ends when
// `scheduler` (its replica) does.
group_actor::behavior_type group_supervisor(group_actor::stateful_pointer<group_state> self,
                                            std::shared_ptr<const model::llama_model> model,
                                            kv::kv_cache_config cache, group_config cfg, caf::actor scheduler);

}  // namespace troupe::actors
