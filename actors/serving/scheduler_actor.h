// The scheduler of one replica as an actor: it owns the replica's engine (block manager and
// continuous-batching loop) and runs one engine step per message to itself while it has work,
// so submissions and aborts are handled between steps. The forward of each step runs on the
// replica's worker group (actors/serving/worker_group.h), spawned linked: if the group gives up, the
// replica ends; if a rank dies, the lost step and the KV are recomputed on the fresh group.
#pragma once
#include <map>
#include <unordered_map>
#include <memory>
#include <functional>
#include <set>

#include "actors/protocol/engine_protocol.h"
#include "actors/protocol/store_protocol.h"
#include "actors/serving/worker_group.h"
#include "runtime/engine/engine.h"
#include "runtime/kv/connector.h"
#include "runtime/kv/event_stream.h"

namespace troupe::actors {

struct scheduler_state {
  std::unique_ptr<engine::engine> engine;
  std::map<std::string, token_sink> sinks;  // where each live request's tokens go
  // Each live request's trace id (the client's X-Request-Id), for this replica's log lines;
  // dropped with its final output, which every accepted request has.
  std::unordered_map<std::string, std::string> traces;
  std::set<caf::actor_addr> watched_sinks;  // monitored: a sink that dies (its head) aborts its requests
  bool step_pending = false;                // a step_atom is in the mailbox
  std::chrono::milliseconds injected_delay{0};  // before each step (fault injection: `slow`)
  std::function<void()> wake;                // sim: what to do when the step's time has passed
  std::uint64_t steps = 0;
  // KV events (runtime/kv/event_stream.h): its generation starts at the spawn time.
  kv::event_stream<kv_event_sink> kv_events;
  group_actor group;        // null for sim
  group_config group_cfg;
  std::function<void(std::vector<kv::transfer::kv_source>)> set_kv_sources;  // the group executor's
  // KV from elsewhere (runtime/kv/connector.h): as a receiver, who holds each request's KV; as
  // a sender, the handed-off blocks held here, their holds, and the relays stood in for.
  kv::connector::scheduler_side<caf::actor> kv;
  bool draining = false;
  bool parked = false;  // in the warm pool (load_report::parked)
  kv_store_actor store;  // this node's KV store, if any: cached blocks let go of are offered to it
  std::vector<caf::typed_response_promise<bool>> drained;  // answered once nothing is left
  static inline const char* name = "troupe.scheduler";
};

// Spawn with what the replica's engine runs; the actor builds and owns the engine. Every
// accepted request ends with exactly one finished update to its sink.
scheduler_actor::behavior_type scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
                                         std::shared_ptr<const model::llama_model> model,
                                         std::shared_ptr<const tokenizer::tokenizer> tok, engine::engine_config cfg,
                                         group_config group = {}, kv_store_actor store = {});

// The same scheduler over the sim backend: each step's outputs are sent when the cost model's
// time for that step has passed (a delayed message, so no thread sleeps).
scheduler_actor::behavior_type sim_scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
                                             model::model_config shape, sim::gpu_spec gpu, engine::engine_config cfg);

}  // namespace troupe::actors
