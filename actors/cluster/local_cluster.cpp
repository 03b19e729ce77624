#include "actors/cluster/local_cluster.h"

#include "actors/serving/kv_store_actor.h"


#include "actors/cluster/node_agent.h"
#include "actors/cluster/tls_error_queue.h"
#include "actors/serving/lora_manager.h"
#include "actors/serving/request_owner.h"
#include "actors/serving/router_actor.h"
#include "actors/serving/scheduler_actor.h"
#include "actors/control/quality_probe.h"
#include "runtime/common/error.h"
#include "runtime/common/machine.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/lora.h"
#include "runtime/model/synth.h"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <unistd.h>

namespace troupe::actors {

void register_protocols(caf::actor_system_config& cfg) {
  register_engine_protocol(cfg);
  register_worker_protocol(cfg);
  register_router_protocol(cfg);
  register_store_protocol(cfg);
  register_node_protocol(cfg);
  cfg.add_message_type<migration_event>("troupe.migration_event");
  cfg.add_message_type<request_view>("troupe.request_view");
  cfg.add_message_type<pool_latency>("troupe.pool_latency");
  cfg.add_message_type<std::vector<pool_latency>>("troupe.pool_latencies");
  cfg.add_message_type<std::vector<request_view>>("troupe.request_views");
  cfg.add_message_type<admin::quality_sample>("troupe.quality_sample");
  cfg.add_message_type<replica_figures>("troupe.replica_figures");
  cfg.add_message_type<std::vector<replica_figures>>("troupe.replica_figures_list");
  cfg.add_message_type<admin_event_sink>("troupe.admin_event_sink");
  cfg.add_message_type<std::vector<migration_event>>("troupe.migration_events");
  cfg.add_message_type<admin::replica_changed>("troupe.replica_changed");
  cfg.add_message_type<admin::placement_event>("troupe.placement_event");
  cfg.add_message_type<admin::admission_event>("troupe.admission_event");
  cfg.add_message_type<admin::migration_event>("troupe.watch_migration_event");
  cfg.add_message_type<autoscale::command>("troupe.autoscaler_command");
  cfg.add_message_type<autoscale::view>("troupe.autoscaler_view");
  cfg.add_message_type<pool_signal_map>("troupe.pool_signals");
}

void configure_workers(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.aggressive-poll-attempts", caf::config_value::integer{100});
  cfg.set("work-stealing.moderate-poll-attempts", caf::config_value::integer{0});
  cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
}

void configure_network(caf::actor_system_config& cfg, const topology::timeouts_spec& t,
                       const topology::cluster_spec& cluster) {
  cfg.load<caf::io::middleman>();
  if (cluster.tls()) {
    for (const auto& f : {cluster.tls_certificate, cluster.tls_key, cluster.tls_ca})
      if (::access(f.c_str(), R_OK) != 0) throw input_error("[cluster] TLS file " + f + " cannot be read");
    keep_tls_error_queue_fix();
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = cluster.tls_certificate;
    cfg.openssl_key = cluster.tls_key;
    cfg.openssl_cafile = cluster.tls_ca;
  }
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::duration_cast<caf::timespan>(t.heartbeat)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::duration_cast<caf::timespan>(t.connection)});
}

void await_started(caf::actor_system& sys, const std::vector<scheduler_actor>& replicas, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys};
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i]) continue;  // a slot not started
    std::string failed;
    self->request(replicas[i], timeout, load_atom::value)
        .receive([](const load_report&) {}, [&](caf::error& e) { failed = sys.render(e); });
    if (!failed.empty()) throw input_error("replica " + std::to_string(i) + " could not start: " + failed);
  }
}

local_cluster::local_cluster(caf::actor_system& sys, const topology::topology_config& topo,
                             std::shared_ptr<const model::llama_model> model,
                             std::shared_ptr<const tokenizer::tokenizer> tok, placement_mode mode, const std::string& head)
    : local_cluster(sys, topo, loaded_models{{"", {std::move(model), std::move(tok)}}}, mode, head) {}

local_cluster::local_cluster(caf::actor_system& sys, const topology::topology_config& topo, const loaded_models& models,
                             placement_mode mode, const std::string& head)
    : sys_(sys), head_(head.empty() ? topo.heads().front()->name : head) {
  if (!topo.is_head(head_)) throw input_error(topo.source + ": \"" + head_ + "\" is not a head of this topology");
  if (topo.model.backend == topology::backend_kind::cuda)
    throw input_error(topo.source + ": backend \"cuda\" cannot run here yet (cpu and sim can)");
  for (const auto& [name, m] : models)
    if (m.model) topology::check_groups(topo, m.model->config(), name);
  topology::check_kv_memory(topo, mode == placement_mode::head_node_only ? head_ : std::string(), machine_memory_bytes(),
                            available_memory_bytes());
  try {
    start(topo, models, mode);
  } catch (...) {
    stop();  // the destructor does not run for a constructor that throws
    throw;
  }
}

namespace {

// The router of head `head`: the topology's policy, roles, warm slots and models.
router_config router_config_of(const topology::topology_config& topo, const std::string& head) {
  const engine::engine_config ec = topology::engine_config_of(topo);
  router_config rc;
  rc.policy = topo.router.policy;
  rc.params = topo.router.params;
  rc.request_timeout = topo.timeouts.request;
  rc.suspect_after = topo.timeouts.suspect;
  rc.names = topology::names_of(topo);
  for (const auto& p : topology::place_replicas(topo)) {
    if (p.role != topology::pool_role::both) rc.roles[p.replica] = p.role;
    if (!p.active) rc.parked.insert(p.replica.value);
    if (!topo.more_models.empty()) rc.models[p.replica] = p.model;
  }
  for (const auto& m : topo.more_models) {  // and each model's stores, wherever they are
    rc.model_keys[m.name] = topology::engine_config_of(topo, m.name).model_key;
    for (const auto& n : topo.nodes) rc.models[store_id_of(topo, n.name, m.name)] = m.name;
  }
  rc.disaggregation = {topo.router.disaggregate_min_prompt, topo.router.disaggregate_queue_ratio};
  rc.block_size = ec.sched.block_size;
  rc.model_key = ec.model_key;
  // One publisher per cluster: the first head's (the others would bind the same endpoints).
  if (topo.kv_events.enabled() && head == topo.heads().front()->name)
    rc.publisher = std::make_shared<kv_event_publisher>(topo.kv_events);
  return rc;
}

}  // namespace

// One KV store per model this process hosts replicas of (a sim replica has no KV bytes to store).
void local_cluster::start_stores(const topology::topology_config& topo, const loaded_models& models, placement_mode mode) {
  if (topo.model.backend == topology::backend_kind::sim) return;
  for (const auto& [name, m] : models) {
    bool hosts = false;
    for (const auto& p : topology::place_replicas(topo)) hosts |= p.model == name && (mode == placement_mode::all_here || p.node == head_);
    if (!hosts || !m.model) continue;
    auto store = spawn_kv_store(sys_, topo, topology::engine_config_of(topo, name), m.model->config(), head_);
    if (!store) continue;
    stores_[name] = store;
    caf::anon_send(router_, store_atom::value, store_id_of(topo, head_, name), store);
  }
}

void local_cluster::start(const topology::topology_config& topo, const loaded_models& models, placement_mode mode) {
  auto& sys = sys_;
  router_config rc = router_config_of(topo, head_);
  if (topo.lora.enabled()) {  // the topology's adapters, by the identity every replica's read of their files gives
    std::vector<std::string> base{topo.frontend.model_name};
    base.insert(base.end(), topo.frontend.model_aliases.begin(), topo.frontend.model_aliases.end());
    loras_ = std::make_shared<api::lora_catalog>(base, std::size_t(topo.lora.max_adapters));
    for (const auto& a : topo.lora.adapters) {  // the served name may come from the model folder, after the file was read
      if (auto why = loras_->refuse_new(a.name, {}))  // "lora_name: WHAT", the HTTP field; here the TOML key
        throw input_error(topo.source + ":" + std::to_string(topo.lora.line) + ": lora.adapters.name: " + why->substr(why->find(": ") + 2));
      loras_->add({a.name, a.path, model::lora_identity(a.name, model::lora_fingerprint(a.path)), true});
    }
    rc.loras = loras_;
  }
  router_ = sys.spawn(actors::router, rc);
  if (loras_) lora_manager_ = sys.spawn(actors::lora_manager, loras_, router_, topo.timeouts.request);
  start_stores(topo, models, mode);
  // The replicas hosted here start through this process's node agent, as a node's do, so that
  // the registry can start and stop more of them later (scaling beyond the warm pool).
  // Ranks of this process's groups that the topology places on other nodes start through those
  // nodes' agents, found in a directory the registry fills as they join.
  std::optional<rank_placement> ranks;
  if (mode == placement_mode::head_node_only) {
    directory_ = sys.spawn(node_directory);
    ranks = rank_placement{head_, directory_};
  }
  auto primary = models.find("");
  agent_ = sys.spawn(node_agent, head_, replica_factory_of(topo, models, stores_, ranks),
                     primary != models.end() && primary->second.model ? primary->second.model->dir() : topo.model.path);
  std::map<std::string, node_agent_actor> local;
  for (const auto& n : topo.nodes)
    if (mode == placement_mode::all_here || n.name == head_) local[n.name] = agent_;
  {
    caf::scoped_actor self{sys};
    for (const auto& p : topology::place_replicas(topo)) {
      if (mode == placement_mode::head_node_only && p.node != head_) continue;
      scheduler_actor s;  // null for a slot stopped until a scale-up (kept so that index = replica id)
      if (p.started)
        self->request(agent_, topo.timeouts.request, spawn_replica_atom::value, p.replica)
            .receive([&](scheduler_actor& x) { s = std::move(x); },
                     [&](caf::error& e) { throw input_error(topo.source + ": replica " + p.name + ": " + sys.render(e)); });
      schedulers_.push_back(s);
      if (s) caf::anon_send(router_, replica_atom::value, p.replica, s);
    }
  }
  await_started(sys, schedulers_, topo.timeouts.request);
  owner_config oc;
  oc.migration_limit = topo.timeouts.migration_limit;
  oc.request_timeout = topo.timeouts.request;
  oc.admission = topo.admission.cfg;
  oc.names = rc.names;
  for (const auto& p : topology::place_replicas(topo)) {
    oc.pools[p.replica.value] = p.pool;
    if (p.active) oc.pool_slots[p.pool] += topo.scheduler.limits.max_num_seqs;
  }
  for (const auto* m : topo.models())
    if (!m->fallback.empty())
      oc.fallbacks[m->name] = {m->fallback, std::chrono::duration<double>(m->fallback_queue_wait).count(), m->fallback_min_priority};
  owner_ = sys.spawn(request_owner, router_, oc);
  registry_ = sys.spawn(node_registry, topo, router_, local, directory_);
  // A replica of this process that dies and is restarted by the agent is registered here again.
  caf::anon_send(agent_, heads_atom::value, std::vector<caf::actor>{caf::actor_cast<caf::actor>(registry_)});
}

void local_cluster::drain_replica(std::size_t i) {
  caf::anon_send(router_, drain_atom::value, replica_id(std::uint32_t(i)));
  caf::anon_send(schedulers_.at(i), drain_atom::value);
}

void local_cluster::kill_replica(std::size_t i) {
  caf::anon_send_exit(schedulers_.at(i), caf::exit_reason::kill);
}

namespace {

group_actor group_actor_of(caf::actor_system& sys, const scheduler_actor& s) {
  caf::scoped_actor self{sys};
  group_actor g;
  self->request(s, std::chrono::seconds(30), group_atom::value)
      .receive([&](group_actor& a) { g = std::move(a); },
               [&](caf::error& e) { throw input_error("replica has no worker group: " + sys.render(e)); });
  return g;
}

}  // namespace

std::vector<worker_actor> local_cluster::ranks_of(std::size_t i) {
  caf::scoped_actor self{sys_};
  std::vector<worker_actor> ranks;
  self->request(group_actor_of(sys_, schedulers_.at(i)), std::chrono::seconds(30), ranks_atom::value)
      .receive([&](std::vector<worker_actor>& r) { ranks = std::move(r); },
               [&](caf::error& e) { throw input_error("worker group: " + sys_.render(e)); });
  return ranks;
}

void local_cluster::kill_worker(std::size_t i, std::size_t rank) { caf::anon_send_exit(ranks_of(i).at(rank), caf::exit_reason::kill); }

void local_cluster::kill_worker_in_collective(std::size_t i, std::size_t rank, int calls) {
  caf::anon_send(ranks_of(i).at(rank), fault_atom::value, std::int32_t(calls));
}

void local_cluster::crash_rank_process_in_collective(std::size_t i, std::size_t rank, int calls) {
  caf::anon_send(ranks_of(i).at(rank), crash_rank_atom::value, std::int32_t(calls));
}

void local_cluster::kill_group(std::size_t i) {
  caf::anon_send_exit(group_actor_of(sys_, schedulers_.at(i)), caf::exit_reason::kill);
}

group_status local_cluster::group_of(std::size_t i) {
  caf::scoped_actor self{sys_};
  group_status st;
  self->request(group_actor_of(sys_, schedulers_.at(i)), std::chrono::seconds(30), ready_atom::value)
      .receive([&](group_status& s) { st = s; }, [&](caf::error& e) { throw input_error("worker group: " + sys_.render(e)); });
  return st;
}

node_registry_actor connect_registry(caf::actor_system& sys, const std::string& host, std::uint16_t port, bool tls) {
  auto r = tls ? caf::openssl::remote_actor<node_registry_actor>(sys, host, port)
               : sys.middleman().remote_actor<node_registry_actor>(host, port);
  if (!r) throw input_error("cannot reach the head at " + host + ":" + std::to_string(port) + ": " + sys.render(r.error()));
  return *r;
}

void local_cluster::admit(join_credentials credentials) { caf::anon_send(registry_, admit_atom::value, std::move(credentials)); }

std::uint16_t local_cluster::publish(const std::string& host, std::uint16_t port, bool tls) {
  auto r = tls ? caf::openssl::publish(registry_, port, host.empty() ? nullptr : host.c_str(), true)
               : sys_.middleman().publish(registry_, port, host.empty() ? nullptr : host.c_str(), true);
  if (!r) throw input_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + sys_.render(r.error()));
  return *r;
}

std::uint32_t local_cluster::live_replicas() {
  caf::scoped_actor self{sys_};
  std::uint32_t n = 0;
  self->request(router_, std::chrono::seconds(10), live_atom::value)
      .receive([&](std::uint32_t live) { n = live; }, [](caf::error&) {});
  return n;
}

local_cluster::~local_cluster() { stop(); }

void local_cluster::stop() {
  caf::anon_send_exit(owner_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
  if (agent_) caf::anon_send_exit(agent_, caf::exit_reason::user_shutdown);  // with the replicas it started since
  for (auto& s : schedulers_)
    if (s) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  for (auto& [model, store] : stores_) caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
  if (directory_) caf::anon_send_exit(directory_, caf::exit_reason::user_shutdown);
  if (lora_manager_) caf::anon_send_exit(lora_manager_, caf::exit_reason::user_shutdown);
}

}  // namespace troupe::actors
