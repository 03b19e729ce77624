#include "actors/cluster/node_agent.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <csignal>
#include <sys/sysinfo.h>
#include <unistd.h>
#include <thread>

#include "actors/serving/kv_store_actor.h"
#include "actors/protocol/error_text.h"
#include "actors/protocol/serve_error.h"
#include "actors/serving/scheduler_actor.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/model_tokenizer.h"
#include "topology/engine_settings.h"

namespace troupe::actors {

void register_node_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<node_resources>("troupe.node_resources");
  cfg.add_message_type<node_agent_actor>("troupe.node_agent_actor");
  cfg.add_message_type<std::vector<std::uint32_t>>("troupe.uint32s");
  cfg.add_message_type<join_request>("troupe.join_request");
  cfg.add_message_type<std::vector<kv_store_actor>>("troupe.kv_store_actors");
  cfg.add_message_type<join_credentials>("troupe.join_credentials");
  cfg.add_message_type<join_reply>("troupe.join_reply");
  cfg.add_message_type<revision_spec>("troupe.revision_spec");
}

namespace {

// A swap's revision of a model this process serves, read from its folder: the same shapes
// (the pool's KV memory and groups were sized for them) and the same token ids (the frontend
// tokenized for the model it stands in for).
model_revision load_revision(const loaded_models& models, const revision_spec& spec) {
  auto serving = models.find(spec.model);
  if (serving == models.end() || !serving->second.model)
    throw input_error("this process serves no replica of " + (spec.model.empty() ? std::string("[model]") : "model " + spec.model));
  const auto& now = *serving->second.model;
  model_revision r;
  r.weights.model = std::shared_ptr<const model::llama_model>(model::llama_model::load(spec.dir));
  r.weights.tok = std::shared_ptr<const tokenizer::tokenizer>(model::load_tokenizer(spec.dir));
  if (model::shape_fingerprint(r.weights.model->config()) != model::shape_fingerprint(now.config()))
    throw input_error(spec.dir + ": another architecture than the served " + now.dir() +
                      " (layers, widths or vocabulary differ); a revision keeps the architecture");
  if (!model::same_token_ids(r.weights.tok.get(), r.weights.model->config().vocab_size, serving->second.tok.get(), now.config().vocab_size))
    throw input_error(spec.dir + ": another tokenizer than the served " + now.dir() + "; a revision must read the same token ids");
  r.key = model::model_fingerprint(spec.dir) + (spec.revision.empty() ? "" : "@" + spec.revision);
  return r;
}

// What a swap loads: the files a revision names, or (no folder) what this process started with
// again. A sim topology's revision has no files: the model's shape under another name.
std::function<model_revision(const revision_spec&)> revision_loader(const loaded_models& models,
                                                                    const std::map<std::string, engine::engine_config>& per_model,
                                                                    const std::map<std::string, model::model_config>& sim_shapes) {
  return [models, per_model, sim_shapes](const revision_spec& spec) {
    const bool sim = !sim_shapes.empty();
    if (spec.dir.empty() && (!sim || spec.revision.empty())) {
      auto m = models.find(spec.model);
      if (!sim && m == models.end()) throw input_error("this process serves no replica of that model");
      return model_revision{sim ? loaded_model{} : m->second, per_model.at(spec.model).model_key};
    }
    if (!sim) return load_revision(models, spec);
    if (spec.revision.empty()) throw input_error("a sim topology's revision needs a name (--revision)");
    return model_revision{{}, model::shape_fingerprint(sim_shapes.at(spec.model)) + "@" + spec.revision};
  };
}

}  // namespace

replica_factory replica_factory_of(const topology::topology_config& topo, const loaded_models& models, const model_stores& stores,
                                   std::optional<rank_placement> ranks) {
  // Per replica: its model's engine settings (that model's key and name), its pool's speculation.
  std::map<std::uint32_t, engine::engine_config> configs;
  std::map<std::uint32_t, std::string> model_of;
  std::set<std::uint32_t> warm;  // a slot past its pool's `replicas` starts in the warm pool (every head's router follows)
  std::map<std::string, engine::engine_config> per_model;  // a model's key reads its files: once each
  for (const auto* m : topo.models()) per_model[m->name] = topology::engine_config_of(topo, m->name);
  for (const auto& p : topology::place_replicas(topo)) {
    engine::engine_config ec = per_model.at(p.model);
    for (const auto& pool : topo.pools)
      if (pool.name == p.pool) ec.speculative = pool.speculative;
    configs[p.replica.value] = std::move(ec);
    model_of[p.replica.value] = p.model;
    if (!p.active) warm.insert(p.replica.value);
  }
  auto parked_if_warm = [warm](scheduler_actor s, replica_id r) {
    if (warm.count(r.value)) caf::anon_send(s, park_atom::value, true);
    return s;
  };
  auto config_of = [configs, ec = per_model.at("")](replica_id r) {
    auto it = configs.find(r.value);
    return it == configs.end() ? ec : it->second;
  };
  if (topo.model.backend == topology::backend_kind::sim) {
    std::map<std::string, model::model_config> shapes;
    for (const auto* m : topo.models()) shapes[m->name] = topology::sim_shape(*m);
    sim::gpu_spec gpu;
    gpu.flops = topo.sim->flops;
    gpu.bandwidth = topo.sim->bandwidth;
    gpu.step_overhead_s = std::chrono::duration<double>(topo.sim->step_overhead).count();
    gpu.speedup = topo.sim->speedup;
    replica_factory f;
    f.start = [=](caf::actor_system& sys, replica_id r, const model_revision* rev) {
      engine::engine_config ec = config_of(r);
      if (rev) ec.model_key = rev->key;
      return parked_if_warm(sys.spawn(sim_scheduler, shapes.at(ec.served_model), gpu, ec), r);
    };
    f.load_revision = revision_loader(models, per_model, shapes);
    return f;
  }
  auto groups = group_configs_of(topo);
  for (auto& g : groups)
    if (ranks) g.node = ranks->node, g.hosts = ranks->hosts;
    else g.rank_nodes.clear();  // every rank in this process
  const std::string source = topo.source;
  std::map<std::uint32_t, std::string> labels;
  for (const auto& [replica, model] : model_of) labels[replica] = topo.model_named(model)->label();
  replica_factory f;
  f.start = [=](caf::actor_system& sys, replica_id r, const model_revision* rev) {
    engine::engine_config ec = config_of(r);
    auto m = models.find(ec.served_model);
    loaded_model weights = m == models.end() ? loaded_model{} : m->second;
    if (rev) {
      weights = rev->weights;
      ec.model_key = rev->key;
    }
    if (!weights.model) {
      auto label = labels.find(r.value);
      throw input_error(source + ": replica " + to_string(r) + " placed here serves " +
                        (label == labels.end() ? std::string("[model]") : label->second) + ", which this process did not load");
    }
    const group_config g = r.value < groups.size() ? groups[r.value] : group_config{};
    auto store = stores.find(ec.served_model);
    return parked_if_warm(sys.spawn(scheduler, weights.model, weights.tok, ec, g, store == stores.end() ? kv_store_actor{} : store->second), r);
  };
  f.load_revision = revision_loader(models, per_model, {});
  return f;
}

replica_factory replica_factory_of(const topology::topology_config& topo, std::shared_ptr<const model::llama_model> model,
                                   std::shared_ptr<const tokenizer::tokenizer> tok, kv_store_actor store,
                                   std::optional<rank_placement> ranks) {
  return replica_factory_of(topo, loaded_models{{"", {std::move(model), std::move(tok)}}}, model_stores{{"", std::move(store)}},
                            std::move(ranks));
}

namespace {

using agent_ptr = node_agent_actor::stateful_pointer<node_agent_state>;

// Starts replica R here and tells every head joined now except `asker` (which registers it).
caf::expected<scheduler_actor> start_replica(agent_ptr self, replica_id replica, const caf::actor_addr& asker) {
  auto& st = self->state;
  try {
    auto rev = st.revisions.find(replica);
    auto s = st.make.start(self->system(), replica, rev == st.revisions.end() ? nullptr : rev->second.get());
    self->monitor(s);
    (*st.live)[replica] = s;
    log::info("replica_started", {{"node", st.node}, {"replica", replica.value}});
    for (const auto& h : st.heads)
      if (h.address() != asker)
        self->request(caf::actor_cast<node_registry_actor>(h), std::chrono::seconds(30), replica_atom::value, replica, s)
            .then([] {}, [](caf::error&) {});
    return s;
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
  }
}

void on_replica_death(agent_ptr self, replica_id replica, const std::string& why) {
  auto& st = self->state;
  const auto d = st.history[replica].on_death(st.restarts, supervision::restart_history::clock::now());
  if (d.paused) {  // it keeps dying: a pause, then it is tried again
    log::error("replica_paused", {{"node", st.node}, {"replica", replica.value}, {"reason", why},
                                  {"restarts_within_period", d.recent},
                                  {"period_s", std::chrono::duration<double>(st.restarts.period).count()},
                                  {"restart_in_s", std::chrono::duration<double>(d.delay).count()}});
    self->delayed_send(self, d.delay, respawn_atom::value, replica);
    return;
  }
  log::warn("replica_died", {{"node", st.node}, {"replica", replica.value}, {"reason", why},
                             {"restart_in_s", std::chrono::duration<double>(d.delay).count()}, {"restarts_within_period", d.recent}});
  self->delayed_send(self, d.delay, respawn_atom::value, replica);
}

}  // namespace

namespace {

// Starts a replica in this process
caf::result<scheduler_actor> spawn_here(node_agent_actor::stateful_pointer<node_agent_state> self, replica_id replica) {
  auto& st = self->state;
  if (st.live->count(replica)) return (*st.live)[replica];
  // The head that asked registers it; the other heads hear of it here.
  auto s = start_replica(self, replica, caf::actor_cast<caf::actor_addr>(self->current_sender()));
  if (!s) return s.error();
  return *s;
}

void respawn_here(node_agent_actor::stateful_pointer<node_agent_state> self, replica_id replica) {
  if (self->state.live->count(replica)) return;  // started again meanwhile (a head's scale-up)
  if (auto s = start_replica(self, replica, caf::actor_addr{}); !s)
    on_replica_death(self, replica, "its restart failed: " + self->system().render(s.error()));
}

// Stops a replica of this process
bool stop_here(node_agent_actor::stateful_pointer<node_agent_state> self, replica_id replica) {
  auto& st = self->state;
  auto it = st.live->find(replica);
  if (it == st.live->end()) return false;
  for (const auto& h : st.heads)  // the head that asked retired it already
    if (h.address() != caf::actor_cast<caf::actor_addr>(self->current_sender()))
      self->send(caf::actor_cast<node_registry_actor>(h), retire_atom::value, replica);
  self->demonitor(it->second.address());
  self->send_exit(it->second, caf::exit_reason::user_shutdown);
  st.live->erase(it);
  log::info("replica_stopped", {{"node", st.node}, {"replica", replica.value}});
  return true;
}

// Starts a rank of a group whose replica runs on another node
caf::result<rank_started> start_rank(node_agent_actor::stateful_pointer<node_agent_state> self, const rank_spec& spec) {
  // A rank of a group whose supervisor is elsewhere: its shard from this node's copy of the
  // model folder, its KV pullable over TCP (the other ranks are in other processes).
  auto& st = self->state;
  if (spec.tensor_rank < 0 || spec.tensor_rank >= spec.tensor_ranks || spec.first < 0 || spec.last <= spec.first ||
      spec.cache.num_blocks <= 0 || spec.cache.block_size <= 0)
    return caf::make_error(caf::sec::invalid_argument, "node \"" + st.node + "\": malformed rank of group " + spec.group);
  try {
    auto shard = model::shared_shard(st.model_dir, {spec.tensor_rank, spec.tensor_ranks, spec.expert_parallel});
    if (spec.last > shard->num_layers())
      return caf::make_error(caf::sec::invalid_argument, "node \"" + st.node + "\": layers up to " + std::to_string(spec.last) +
                                                              " asked, the model has " + std::to_string(shard->num_layers()));
    std::shared_ptr<collectives::fault_injector> tp;
    if (spec.tensor_ranks > 1) tp = std::make_shared<collectives::fault_injector>();
    auto r = start_rank(self->system(), spec, shard, tp, nullptr, true);
    log::info("rank_started", {{"node", st.node}, {"group", spec.group}, {"stage", spec.stage}, {"rank", spec.tensor_rank},
                               {"generation", spec.generation}});
    return r.started;
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::runtime_error, "node \"" + st.node + "\": " + e.what());
  }
}

void set_log_level(node_agent_actor::stateful_pointer<node_agent_state> self, const std::string& level) {
  if (auto l = log::parse_level(level)) {
    log::info("log_level", {{"node", self->state.node}, {"level", level}});  // at the level it leaves
    log::set_level(*l);
  }
}

void crash_now(node_agent_actor::stateful_pointer<node_agent_state> self) {
  log::warn("node_killed", {{"node", self->state.node}, {"by", "admin"}});
  ::kill(::getpid(), SIGKILL);  // as if it crashed: no goodbye to anyone
}

// Bounded: a head is trusted, but a record that grows without end must not grow the node.
void keep_record(node_agent_state& st, const std::string& pool, const std::string& text) {
  constexpr std::size_t max_pools = 64, max_bytes = 64 * 1024;
  if (text.size() > max_bytes || pool.size() > 256) return;
  if (st.rollout_records.size() >= max_pools && !st.rollout_records.count(pool)) return;
  st.rollout_records[pool] = text;
}

std::vector<std::string> records_of(const node_agent_state& st) {
  std::vector<std::string> out;
  for (const auto& [pool, text] : st.rollout_records) out.push_back(text);
  return out;
}

// Loads a swap's revision (in the agent's thread: the registry's request waits for it); the
// pool's replicas start with it from now on.
caf::result<std::vector<load_report>> loads_here(node_agent_actor::stateful_pointer<node_agent_state> self) {
  auto rp = self->make_response_promise<std::vector<load_report>>();
  const auto live = self->state.live;
  if (live->empty()) {
    rp.deliver(std::vector<load_report>{});
    return rp;
  }
  auto out = std::make_shared<std::vector<load_report>>();
  auto left = std::make_shared<std::size_t>(live->size());
  for (auto& [id, replica] : *live)
    self->request(replica, std::chrono::seconds(5), load_atom::value)
        .then(
            [=](load_report& r) mutable {
              out->push_back(std::move(r));
              if (--*left == 0) rp.deliver(*out);
            },
            [=](caf::error&) mutable {
              if (--*left == 0) rp.deliver(*out);
            });
  return rp;
}

caf::result<std::string> take_revision(node_agent_actor::stateful_pointer<node_agent_state> self, const revision_spec& spec) {
  auto& st = self->state;
  if (!st.make.load_revision) return caf::make_error(caf::sec::invalid_argument, "node \"" + st.node + "\" loads no revisions");
  try {
    auto rev = std::make_shared<const model_revision>(st.make.load_revision(spec));
    for (auto r : spec.replicas) st.revisions[r] = rev;
    log::info("revision_loaded", {{"node", st.node}, {"pool", spec.pool}, {"dir", spec.dir}, {"key", rev->key}});
    return rev->key;
  } catch (const std::exception& e) {
    return caf::make_error(caf::sec::invalid_argument, "node \"" + st.node + "\": " + e.what());
  }
}

// What this node's machine has, for the head's placement
node_resources resources_of(node_agent_actor::stateful_pointer<node_agent_state> self) {
  auto& st = self->state;
  node_resources r;
  r.node = st.node;
  r.cores = std::int32_t(std::thread::hardware_concurrency());
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) {
    r.memory_total = std::uint64_t(si.totalram) * si.mem_unit;
    r.memory_available = std::uint64_t(si.freeram + si.bufferram) * si.mem_unit;
  }
  r.model = st.model_dir;
  for (auto& [id, s] : *st.live) r.replicas.push_back(id);
  return r;
}

}  // namespace

node_agent_actor::behavior_type node_agent(node_agent_actor::stateful_pointer<node_agent_state> self, std::string node,
                                           replica_factory make, std::string model_dir) {
  auto& st = self->state;
  st.node = std::move(node);
  st.make = std::move(make);
  st.model_dir = std::move(model_dir);
  // A replica that dies (the head moves its requests) is restarted after a backoff, or given up.
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& reps = *self->state.live;
    for (auto it = reps.begin(); it != reps.end(); ++it)
      if (it->second.address() == m.source) {
        const replica_id r = it->first;
        reps.erase(it);
        on_replica_death(self, r, self->system().render(m.reason));
        return;
      }
  });
  // When the agent goes, its replicas go with it (the functor runs after the state is gone, so
  // it keeps its own view of them).
  self->attach_functor([live = st.live](const caf::error&) {
    for (auto& [id, s] : *live) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  });
  return {
      [=](spawn_replica_atom, replica_id replica) { return spawn_here(self, replica); },
      [=](respawn_atom, replica_id replica) { respawn_here(self, replica); },
      [=](stop_replica_atom, replica_id replica) { return stop_here(self, replica); },
      [=](heads_atom, std::vector<caf::actor>& heads) { self->state.heads = std::move(heads); },
      [=](rank_atom, const rank_spec& spec) { return start_rank(self, spec); },
      [=](log_level_atom, const std::string& level) { set_log_level(self, level); },
      [=](crash_atom) { crash_now(self); },
      [=](resources_atom) { return resources_of(self); },
      [=](revision_atom, const revision_spec& spec) { return take_revision(self, spec); },
      [=](rollout_record_atom, const std::string& pool, const std::string& text) { keep_record(self->state, pool, text); },
      [=](rollout_record_atom) { return records_of(self->state); },
      [=](load_atom) { return loads_here(self); },
  };
}

namespace {

// Replica R's placement and the agent of its node now (null: that node is not here or has not
// joined), or an error when the topology has no replica R.
struct placed_replica {
  topology::replica_placement where;
  node_agent_actor agent;
};

caf::expected<placed_replica> agent_of(const node_registry_state& st, replica_id r) {
  for (const auto& p : topology::place_replicas(st.topo))
    if (p.replica == r) {
      if (auto l = st.local.find(p.node); l != st.local.end()) return placed_replica{p, l->second};
      if (auto j = st.joined.find(p.node); j != st.joined.end()) return placed_replica{p, caf::actor_cast<node_agent_actor>(j->second)};
      return placed_replica{p, {}};
    }
  return caf::make_error(caf::sec::invalid_argument, "no replica " + to_string(r) + " in the topology");
}

// Registers replica R (its scheduler `s`) with this head's router in the warm pool: parked
// first, so nothing is placed on it before the console that asked unparks it.
void register_warm(node_registry_actor::stateful_pointer<node_registry_state> self, replica_id replica, scheduler_actor s,
                   std::function<void(std::optional<caf::error>)> done) {
  auto& st = self->state;
  st.scaled_up.insert(replica);
  st.retired.erase(replica);
  self->send(st.router, park_atom::value, replica);
  self->request(st.router, st.topo.timeouts.request, replica_atom::value, replica, std::move(s))
      .then([=](bool) { done(std::nullopt); }, [=](caf::error& e) { done(e); });
}

}  // namespace

namespace {

// The console's kill NODE: the node's agent ends its process, as if it crashed
caf::result<bool> crash_node(node_registry_actor::stateful_pointer<node_registry_state> self, const std::string& node) {
  auto it = self->state.joined.find(node);
  if (it == self->state.joined.end())
    return caf::make_error(caf::sec::invalid_argument, "node \"" + node + "\" has not joined (or is already dead)");
  auto agent = caf::actor_cast<node_agent_actor>(it->second);
  if (!agent) return caf::make_error(caf::sec::invalid_argument, "node \"" + node + "\" is gone");
  self->send(agent, crash_atom::value);
  return true;
}

// Starts a replica where the topology places it (this process's agent, or a joined node's)
caf::result<bool> spawn_on_node(node_registry_actor::stateful_pointer<node_registry_state> self, replica_id replica) {
  auto& st = self->state;
  auto found = agent_of(st, replica);
  if (!found) return found.error();
  if (!found->agent)
    return caf::make_error(caf::sec::invalid_argument, "node \"" + found->where.node + "\" of " + found->where.name + " has not joined");
  auto rp = self->make_response_promise<bool>();
  self->request(found->agent, st.topo.timeouts.request, spawn_replica_atom::value, replica)
      .then(
          [=](scheduler_actor s) mutable {
            register_warm(self, replica, std::move(s), [=](std::optional<caf::error> e) mutable {
              if (e) rp.deliver(*e);
              else rp.deliver(true);
            });
          },
          [=](caf::error& e) mutable { rp.deliver(e); });
  return rp;
}

// Stops a replica where it runs
caf::result<bool> stop_on_node(node_registry_actor::stateful_pointer<node_registry_state> self, replica_id replica) {
  auto& st = self->state;
  auto found = agent_of(st, replica);
  if (!found) return found.error();
  const node_agent_actor agent = found->agent;
  st.retired.insert(replica);
  st.scaled_up.erase(replica);
  auto rp = self->make_response_promise<bool>();
  self->request(st.router, st.topo.timeouts.request, retire_atom::value, replica)
      .then(
          [=](bool) mutable {
            if (!agent) {  // its node is gone, and the replica with it
              rp.deliver(true);
              return;
            }
            self->request(agent, self->state.topo.timeouts.request, stop_replica_atom::value, replica)
                .then([=](bool) mutable { rp.deliver(true); }, [=](caf::error& e) mutable { rp.deliver(e); });
          },
          [=](caf::error& e) mutable { rp.deliver(e); });
  return rp;
}

// Every joined node's log level; answers how many took it
std::uint32_t set_nodes_log_level(node_registry_actor::stateful_pointer<node_registry_state> self, const std::string& level) {
  std::uint32_t told = 0;
  for (const auto& [node, addr] : self->state.joined)
    if (auto agent = caf::actor_cast<node_agent_actor>(addr)) {
      self->send(agent, log_level_atom::value, level);
      ++told;
    }
  return told;
}

// The agents of the joined nodes and of those in the head's own process.
std::vector<node_agent_actor> every_agent(const node_registry_state& st) {
  std::vector<node_agent_actor> agents;
  for (const auto& [node, addr] : st.joined)
    if (auto agent = caf::actor_cast<node_agent_actor>(addr)) agents.push_back(agent);
  for (const auto& [node, agent] : st.local)
    if (agent && !st.joined.count(node)) agents.push_back(agent);
  return agents;
}

// A rollout's record, everywhere a head may need it after the one running it is gone.
void records_to_nodes(node_registry_actor::stateful_pointer<node_registry_state> self, const std::string& pool, const std::string& text) {
  for (const auto& agent : every_agent(self->state)) self->send(agent, rollout_record_atom::value, pool, text);
}

// Every node's records; a node that does not answer in time adds none.
caf::result<std::vector<std::string>> records_from_nodes(node_registry_actor::stateful_pointer<node_registry_state> self) {
  const auto agents = every_agent(self->state);
  if (agents.empty()) return std::vector<std::string>{};
  auto rp = self->make_response_promise<std::vector<std::string>>();
  auto left = std::make_shared<std::size_t>(agents.size());
  auto all = std::make_shared<std::vector<std::string>>();
  for (const auto& agent : agents)
    self->request(agent, self->state.topo.timeouts.request, rollout_record_atom::value)
        .then(
            [=](const std::vector<std::string>& texts) mutable {
              all->insert(all->end(), texts.begin(), texts.end());
              if (--*left == 0) rp.deliver(*all);
            },
            [=](caf::error&) mutable {
              if (--*left == 0) rp.deliver(*all);
            });
  return rp;
}

// A model load may take minutes on a large model; the nodes load theirs side by side.
constexpr auto revision_load_timeout = std::chrono::minutes(10);

// Every process hosting a replica of the pool loads the revision; answers the key they agree on
caf::result<std::string> load_revision_on_nodes(node_registry_actor::stateful_pointer<node_registry_state> self, revision_spec spec) {
  auto& st = self->state;
  const auto* pool = st.topo.pool_named(spec.pool);
  if (!pool) return caf::make_error(caf::sec::invalid_argument, "no pool named '" + spec.pool + "'");
  spec.model = pool->model;
  std::map<caf::actor_addr, std::pair<std::string, node_agent_actor>> agents;  // one load per process
  for (const auto& p : topology::place_replicas(st.topo)) {
    if (p.pool != spec.pool) continue;
    spec.replicas.push_back(p.replica);
    auto found = agent_of(st, p.replica);
    if (!found || !found->agent)
      return caf::make_error(caf::sec::invalid_argument, "node \"" + p.node + "\" of " + p.name + " has not joined; it could not load the revision");
    agents[found->agent.address()] = {p.node, found->agent};
  }
  auto rp = self->make_response_promise<std::string>();
  auto left = std::make_shared<std::size_t>(agents.size());
  auto keys = std::make_shared<std::set<std::string>>();
  auto failed = std::make_shared<std::string>();
  auto one_done = [=]() mutable {
    if (--*left > 0) return;
    if (!failed->empty())
      rp.deliver(caf::make_error(caf::sec::invalid_argument, *failed));
    else if (keys->size() != 1)
      rp.deliver(caf::make_error(caf::sec::invalid_argument, "the nodes' copies of " + spec.dir + " differ"));
    else
      rp.deliver(*keys->begin());
  };
  for (const auto& [addr, node_agent] : agents)
    self->request(node_agent.second, revision_load_timeout, revision_atom::value, spec)
        .then([=](const std::string& key) mutable { keys->insert(key), one_done(); },
              [=](caf::error& e) mutable {
                if (failed->empty()) *failed = error_message(self->system(), e);
                one_done();
              });
  return rp;
}

void retire_replica(node_registry_actor::stateful_pointer<node_registry_state> self, replica_id replica) {
  self->state.retired.insert(replica);
  self->state.scaled_up.erase(replica);
  self->request(self->state.router, self->state.topo.timeouts.request, retire_atom::value, replica)
      .then([](bool) {}, [](caf::error&) {});
}

// A node process asks to join: its token, model fingerprint and name are checked before it is admitted
caf::result<join_reply> admit_node(node_registry_actor::stateful_pointer<node_registry_state> self, const join_request& j) {
  auto& st = self->state;
  const std::string& node = j.node;
  auto refuse = [&](const std::string& why, serve_errc code = serve_errc::join_refused) { return make_serve_error(code, why); };
  if (!st.credentials) return refuse("the head is not admitting nodes yet; retry", serve_errc::join_later);
  if (!constant_time_equal(j.token, st.credentials->token)) return refuse("node \"" + node + "\": wrong cluster token");
  if (j.fingerprint != st.credentials->fingerprint)
    return refuse("node \"" + node + "\" serves another model (fingerprint " + j.fingerprint + ", the head's is " +
                  st.credentials->fingerprint + ")");
  if (!st.topo.node(node))
    return refuse(st.topo.source + ": no node named \"" + node + "\"");
  if (st.topo.is_head(node)) return refuse("\"" + node + "\" is a head, not a node that joins one");
  if (st.joined.count(node)) return refuse("node \"" + node + "\" has already joined and is alive", serve_errc::join_later);
  if (!j.agent) return refuse("node \"" + node + "\" sent no agent");
  st.joined.emplace(node, j.agent.address());
  self->monitor(j.agent);
  if (st.directory) caf::anon_send(st.directory, agent_atom::value, node, caf::actor_cast<caf::actor>(j.agent));
  const auto models = st.topo.models();
  for (std::size_t i = 0; i < j.stores.size() && i < models.size(); ++i)
    if (j.stores[i]) self->send(st.router, store_atom::value, store_id_of(st.topo, node, models[i]->name), j.stores[i]);
  const node_agent_actor agent = j.agent;
  // What the node runs: the topology's started replicas, less those scaled down, plus those
  // scaled up (left out, a replica a scale-up had started stayed dead after its node rejoined).
  std::vector<replica_id> mine;
  for (auto& p : topology::place_replicas(st.topo))
    if (p.node == node && ((p.started && !st.retired.count(p.replica)) || st.scaled_up.count(p.replica))) mine.push_back(p.replica);
  auto rp = self->make_response_promise<join_reply>();
  const std::uint64_t generation = st.generation;
  if (mine.empty()) {
    rp.deliver(join_reply{0, generation});
    return rp;
  }
  auto left = std::make_shared<std::size_t>(mine.size());
  for (auto replica : mine) {
    // Spawned on the node, then registered with the router; the join is answered once
    // every replica of the node can be placed on.
    self->request(agent, st.topo.timeouts.request, spawn_replica_atom::value, replica)
        .then(
            [=](scheduler_actor s) mutable {
              self->request(self->state.router, self->state.topo.timeouts.request, replica_atom::value, replica, s)
                  .then([=](bool) mutable {
                          if (--*left == 0) rp.deliver(join_reply{std::uint32_t(mine.size()), generation});
                        },
                        [=](caf::error& e) mutable { rp.deliver(e); });
            },
            [=](caf::error& e) mutable { rp.deliver(e); });
  }
  return rp;
}

}  // namespace

node_registry_actor::behavior_type node_registry(node_registry_actor::stateful_pointer<node_registry_state> self,
                                                 topology::topology_config topo, router_actor router,
                                                 std::map<std::string, node_agent_actor> local, caf::actor directory) {
  self->state.directory = std::move(directory);
  self->state.topo = std::move(topo);
  self->state.router = std::move(router);
  self->state.local = std::move(local);
  // Nanoseconds since the epoch at start: larger for every later start of a head.
  self->state.generation = std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  // A node that goes away may join again (a restarted process); until then its name is taken.
  self->set_down_handler([=](const caf::down_msg& d) {
    auto& joined = self->state.joined;
    for (auto it = joined.begin(); it != joined.end(); ++it)
      if (it->second == d.source) {
        joined.erase(it);
        return;
      }
  });
  return {
      [=](admit_atom, const join_credentials& c) { self->state.credentials = c; },
      [=](crash_atom, const std::string& node) { return crash_node(self, node); },
      [=](spawn_replica_atom, replica_id replica) { return spawn_on_node(self, replica); },
      [=](stop_replica_atom, replica_id replica) { return stop_on_node(self, replica); },
      [=](replica_atom, replica_id replica, scheduler_actor s) {  // started at another head's request
        register_warm(self, replica, std::move(s), [](std::optional<caf::error>) {});
      },
      [=](log_level_atom, const std::string& level) { return set_nodes_log_level(self, level); },
      [=](retire_atom, replica_id replica) { retire_replica(self, replica); },
      [=](join_atom, const join_request& j) { return admit_node(self, j); },
      [=](revision_atom, const revision_spec& spec) { return load_revision_on_nodes(self, spec); },
      [=](rollout_record_atom, const std::string& pool, const std::string& text) { records_to_nodes(self, pool, text); },
      [=](rollout_record_atom) { return records_from_nodes(self); },
  };
}

}  // namespace troupe::actors
