// The embedding API: start a topology's actors inside the caller's own CAF actor system and get
// the handles to submit requests and receive tokens. This is the single-process form: every
// pool runs in this process, whatever node it names.
#pragma once
#include <memory>
#include <vector>

#include "actors/protocol/owner_protocol.h"
#include "actors/protocol/router_protocol.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "topology/topology.h"

namespace troupe::actors {

// Adds every Troupe message type to a config; call once, before the actor system starts.
void register_protocols(caf::actor_system_config& cfg);

class local_cluster {
 public:
  // Spawns one scheduler per replica of every pool, a router with the topology's policy and a
  // request owner. Throws input_error for a backend this form cannot run (sim, cuda).
  local_cluster(caf::actor_system& sys, const topology::topology_config& topo,
                std::shared_ptr<const model::llama_model> model, std::shared_ptr<const tokenizer::tokenizer> tok);
  // Stops every actor it spawned.
  ~local_cluster();
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  // Where clients submit: submit_atom + generate_request + a token_sink.
  owner_actor owner() const { return owner_; }
  router_actor router() const { return router_; }
  const std::vector<scheduler_actor>& schedulers() const { return schedulers_; }

  // Fault injection: kills replica i's scheduler as if its process died.
  void kill_replica(std::size_t i);

 private:
  caf::actor_system& sys_;
  std::vector<scheduler_actor> schedulers_;
  router_actor router_;
  owner_actor owner_;
};

}  // namespace troupe::actors
