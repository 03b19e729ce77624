#include "actors/local_cluster.h"

#include "actors/request_owner.h"
#include "actors/router_actor.h"
#include "actors/scheduler_actor.h"
#include "runtime/common/error.h"

namespace troupe::actors {

void register_protocols(caf::actor_system_config& cfg) {
  register_engine_protocol(cfg);
  register_router_protocol(cfg);
  cfg.add_message_type<migration_event>("troupe.migration_event");
  cfg.add_message_type<std::vector<migration_event>>("troupe.migration_events");
}

local_cluster::local_cluster(caf::actor_system& sys, const topology::topology_config& topo,
                             std::shared_ptr<const model::llama_model> model,
                             std::shared_ptr<const tokenizer::tokenizer> tok)
    : sys_(sys) {
  if (topo.model.backend != topology::backend_kind::cpu)
    throw input_error(topo.source + ": backend \"" + std::string(topology::backend_name(topo.model.backend)) +
                      "\" cannot run in a single-process cluster");
  engine::engine_config ec;
  ec.sched = topo.scheduler.limits;
  ec.kv_type = topo.scheduler.kv_dtype;
  ec.kv_memory_bytes = topo.scheduler.kv_memory_bytes;
  ec.max_model_len = topo.model.max_model_len;
  router_config rc;
  rc.policy = topo.router.policy;
  rc.params = topo.router.params;
  rc.request_timeout = topo.timeouts.request;
  router_ = sys.spawn(actors::router, rc);
  std::uint32_t replica = 0;
  for (const auto& pool : topo.pools)
    for (int i = 0; i < pool.replicas; ++i) {
      auto s = sys.spawn(scheduler, model, tok, ec);
      schedulers_.push_back(s);
      caf::anon_send(router_, replica_atom::value, replica++, s);
    }
  owner_config oc;
  oc.migration_limit = topo.timeouts.migration_limit;
  oc.request_timeout = topo.timeouts.request;
  owner_ = sys.spawn(request_owner, router_, oc);
}

void local_cluster::kill_replica(std::size_t i) {
  caf::anon_send_exit(schedulers_.at(i), caf::exit_reason::kill);
}

local_cluster::~local_cluster() {
  caf::anon_send_exit(owner_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  for (auto& s : schedulers_) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
}

}  // namespace troupe::actors
