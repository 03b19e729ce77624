// A replica's executor: worker ranks (pipeline stages over the model's layers, each owning the
// KV tensors of its layers) under a group supervisor that restarts them as a whole.
#pragma once
#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <set>

#include "actors/protocol/worker_protocol.h"
#include "runtime/engine/engine.h"
#include "runtime/model/llama_model.h"

namespace troupe::actors {

struct group_config {
  int pipeline_ranks = 1;  // layers are split evenly over the ranks, in order
  int max_restarts = 3;    // restarts allowed within restart_window before the group gives up
  std::chrono::milliseconds restart_window{60000};
  std::chrono::milliseconds step_timeout{120000};  // a step slower than this restarts the group
};

// Layers [first, last) of rank r of n, for a model of `layers` layers.
std::pair<int, int> rank_layers(int layers, int r, int n);
// The ranks a group of `cfg` has for a model of `layers` layers: at least 1, at most one a layer.
inline int group_ranks(const group_config& cfg, int layers) { return std::max(1, std::min(cfg.pipeline_ranks, layers)); }

struct worker_state {
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<kv::kv_cache> cache;  // this rank's layers only (made and exposed by the group)
  model::forward_workspace ws;
  std::vector<float> logits;  // the last rank's, reused every step
  int first = 0, last = 0;
  worker_actor next;  // null on the last rank
  static inline const char* name = "troupe.worker";
};

// One rank over layers [first, last) with `cache`, the KV tensors of exactly those layers.
// `next` is the following rank (null on the last); the rank ends when `supervisor` does.
worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, std::shared_ptr<kv::kv_cache> cache,
                                   int first, int last, worker_actor next, caf::actor supervisor);

struct group_state {
  std::shared_ptr<const model::llama_model> model;
  kv::kv_cache_config cache;
  group_config cfg;
  std::vector<worker_actor> ranks;
  // Each rank's cache and where other replicas pull it from, this generation; the scheduler is
  // told the sources at every (re)start, and they are withdrawn when the ranks go.
  std::vector<std::shared_ptr<kv::kv_cache>> caches;
  std::vector<kv::transfer::kv_source> sources;
  caf::actor scheduler;
  ~group_state();
  std::set<caf::actor_addr> retired;  // ranks of earlier generations
  std::uint32_t restarts = 0;
  std::deque<std::chrono::steady_clock::time_point> recent;  // restart times inside the window
  static inline const char* name = "troupe.group_supervisor";
};

// Spawns `cfg.pipeline_ranks` ranks over the model's layers, each with a fresh cache of the
// geometry `cache` (in shared memory when cache.shared) exposed for pulls, tells `scheduler`
// where the caches can be pulled from (kv_sources_atom), and restarts the ranks as a whole when
// one dies, at most cfg.max_restarts times per cfg.restart_window; past that it exits with an
// error. It ends when `scheduler` (its replica) does.
group_actor::behavior_type group_supervisor(group_actor::stateful_pointer<group_state> self,
                                            std::shared_ptr<const model::llama_model> model,
                                            kv::kv_cache_config cache, group_config cfg, caf::actor scheduler);

}  // namespace troupe::actors
