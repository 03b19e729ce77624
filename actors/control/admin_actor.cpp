#include "actors/control/admin_actor.h"
#include "actors/control/admin_ops.h"

#include "actors/protocol/error_text.h"
#include "runtime/common/log.h"
#include "runtime/common/wall_clock.h"

#include <algorithm>
#include <memory>
#include <optional>

namespace troupe::actors {

using namespace admin_ops;

// Scales `pool` to `n` serving replicas: warm ones join (the router places on them again), and
// when there are too few, stopped ones start through their node agents first; or the newest
// serving ones drain (their requests move with their KV) and wait warm. Either way the warm
// pool is then brought back to warm_replicas (started or stopped through the node agents).
// `done` gets the result once every serving change is made, or why nothing was done.
void scale_pool(admin_ptr self, const std::string& pool, int n, const std::string& reason,
                std::function<void(bool, nlohmann::json)> done) {
  refresh(self, [=] {
    auto& st = self->state;
    const auto bounds = pool_bounds(st.cfg.topo);
    auto b = std::find_if(bounds.begin(), bounds.end(), [&](const admin::pool_bounds& x) { return x.name == pool; });
    if (b == bounds.end()) return done(false, "scale: no pool named '" + pool + "'");
    if (n < b->min || n > b->max)
      return done(false, "scale: pool " + pool + " runs " + std::to_string(b->min) + " to " + std::to_string(b->max) +
                             " replicas (min_replicas, max_replicas); " + std::to_string(n) + " is outside");
    const int warm_target = b->warm;
    const pool_members m = members_of(self, pool);
    const int before = int(m.serving.size());
    if (n >= before) {
      const std::size_t need = std::size_t(n - before);
      const std::size_t from_warm = std::min(need, m.warm.size());
      if (need - from_warm > m.stopped.size() || (need > from_warm && !st.cfg.registry))
        return done(false, "scale: pool " + pool + " has " + std::to_string(m.warm.size()) + " warm and " +
                               std::to_string(st.cfg.registry ? m.stopped.size() : 0) + " startable replicas, " + std::to_string(need) +
                               " needed");
      nlohmann::json names = nlohmann::json::array();
      for (std::size_t k = 0; k < from_warm; ++k) {
        unpark(self, m.warm[k]);
        names.push_back(st.replicas[m.warm[k]].name);
      }
      const std::vector<std::size_t> cold(m.stopped.begin(), m.stopped.begin() + (need - from_warm));
      // Cold ones start (a model load), then serve; the answer waits for them.
      start_replicas(self, cold, [=](std::optional<std::string> error) mutable {
        for (auto i : cold)
          if (self->state.schedulers[i]) {
            unpark(self, i);
            names.push_back(self->state.replicas[i].name);
          }
        if (n != before)
          emit(self, "scale", {{"pool", pool}, {"from", before}, {"to", before + int(names.size())}, {"added", names}, {"reason", reason}});
        keep_warm(self, pool, warm_target);
        if (error) return done(false, "scale: " + *error);
        done(true, {{"pool", pool}, {"replicas", n}, {"added", names}});
      });
      return;
    }
    // Down: the newest serving replicas drain, then park; the answer waits for all of them.
    nlohmann::json names = nlohmann::json::array();
    auto left = std::make_shared<int>(before - n);
    auto failed = std::make_shared<std::string>();
    for (int k = 0; k < before - n; ++k) {
      const std::size_t i = m.serving[m.serving.size() - 1 - std::size_t(k)];
      const replica_id id{st.replicas[i].id};
      names.push_back(st.replicas[i].name);
      drain(self, i, [=](std::optional<std::string> error) {
        auto& st = self->state;
        if (error) {
          *failed = *error;
        } else {
          self->send(st.cfg.router, park_atom::value, id);
          if (st.schedulers[i]) {
            self->send(st.schedulers[i], park_atom::value, true);  // for the other heads' routers
            self->send(st.schedulers[i], resume_atom::value);     // serves again once unparked
          }
          announce(self, i, "warm");
        }
        if (--*left > 0) return;
        if (!failed->empty()) return done(false, "scale: " + *failed);
        emit(self, "scale", {{"pool", pool}, {"from", before}, {"to", n}, {"removed", names}, {"reason", reason}});
        refresh(self, [=] { keep_warm(self, pool, warm_target); });
        done(true, {{"pool", pool}, {"replicas", n}, {"removed", names}});
      });
    }
  });
}

namespace {

nlohmann::json topology_json(const topology::topology_config& t) {
  nlohmann::json out{{"source", t.source}, {"nodes", nlohmann::json::array()}, {"pools", nlohmann::json::array()}};
  for (const auto& n : t.nodes)
    out["nodes"].push_back({{"name", n.name}, {"address", n.host + ":" + std::to_string(n.port)}, {"head", t.is_head(n.name)}});
  for (const auto& p : t.pools)
    out["pools"].push_back({{"name", p.name}, {"model", p.model.empty() ? "[model]" : p.model}, {"role", topology::role_name(p.role)},
                            {"replicas", p.replicas}, {"nodes", p.nodes}});
  out["router"] = {{"policy", t.router.policy}};
  out["model"] = {{"path", t.model.path}};
  for (const auto& m : t.more_models) out["models"][m.name] = {{"path", m.path}, {"served_names", m.served_names}};
  return out;
}

// Refreshes the replicas' view and each pool's recent latencies (from the request owner), then
// `then`.
void gather(admin_ptr self, std::function<void()> then) {
  refresh(self, [=] {
    if (!self->state.cfg.owner) return then();
    self->request(self->state.cfg.owner, self->state.cfg.timeout, latency_atom::value)
        .then(
            [=](std::vector<pool_latency>& t) {
              self->state.latency = std::move(t);
              then();
            },
            [=](caf::error&) { then(); });
  });
}

// `status` (with each pool's recent latencies) to `then`.
void status(admin_ptr self, std::function<void(nlohmann::json)> then) {
  gather(self, [=] {
    std::vector<std::string> nodes;
    for (const auto& n : self->state.cfg.topo.nodes) nodes.push_back(n.name);
    nlohmann::json s = admin::status_json(self->state.replicas, nodes, pool_bounds(self->state.cfg.topo));
    for (auto& p : s["pools"]) {
      pool_latency l;
      for (const auto& t : self->state.latency)
        if (t.pool == p["name"].get<std::string>()) l = t;
      p["ttft_s"] = l.ttft_s;
      p["itl_s"] = l.itl_s;
      p["ttft_age_s"] = l.ttft_age_s;
      p["itl_age_s"] = l.itl_age_s;
    }
    then(std::move(s));
  });
}

// `help`: the server's commands and what each does
void cmd_help(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& /*args*/) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, what] : admin::server_commands()) list.push_back({{"command", name}, {"does", what}});
  return answer(self, token, {{"commands", list}});
}

// `topology`: what this head runs, and its model
void cmd_topology(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& /*args*/) {
  auto& st = self->state;
  nlohmann::json t = topology_json(st.cfg.topo);
  // The head's cards: [model]'s, and each [models.NAME]'s under its name.
  if (st.cfg.model.is_object() && st.cfg.model.contains("models")) {
    t["models"] = st.cfg.model["models"];
    t["model"] = st.cfg.model["model"];
  } else if (st.cfg.model.is_object() && !st.cfg.model.empty()) {
    t["model"] = st.cfg.model;
  }
  return answer(self, token, std::move(t));
}

// `status`: every replica's state and load
void cmd_status(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& args) {
  if (!args.empty()) return refuse(self, token, "status: takes no arguments");
  return status(self, [=](nlohmann::json s) { answer(self, token, std::move(s)); });
}

// `autoscaler ...` and `set-policy autoscaler default KEY=VALUE...`: parsed here, run by the
// autoscaler
void cmd_autoscaler(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto& st = self->state;
  if (!st.autoscaler) return refuse(self, token, cmd + ": this cluster runs no autoscaler ([autoscaler] in the topology)");
  std::vector<std::string> a = args;
  if (cmd == "set-policy") {  // set-policy autoscaler NAME KEY=VALUE...: NAME is "default", the one policy
    if (a.size() < 2 || a[1] != "default") return refuse(self, token, "set-policy autoscaler: the policy is \"default\"; expected default KEY=VALUE ...");
    a.erase(a.begin(), a.begin() + 2);
    a.insert(a.begin(), "set");
  }
  emit(self, "admin", {{"command", cmd}, {"args", args}});
  auto parsed = autoscale::parse_command(a);
  if (auto* bad = std::get_if<std::string>(&parsed)) return refuse(self, token, cmd + ": " + *bad);
  self->request(st.autoscaler, st.cfg.timeout, autoscaler_atom::value, std::get<autoscale::command>(parsed))
      .then([=](const autoscale::view& v) { answer(self, token, autoscale::view_json(v)); },
            [=](caf::error& e) { refuse(self, token, cmd + ": " + error_message(self->system(), e)); });
}

// `kv [REPLICA]`: the replicas' KV use
void cmd_kv(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& args) {
  if (args.size() > 1) return refuse(self, token, "kv: expected at most one replica name");
  return refresh(self, [=] {
    auto& st = self->state;
    if (args.empty()) return answer(self, token, admin::kv_json(st.replicas));
    auto i = admin::find_replica(st.replicas, args[0]);
    if (!i) return refuse(self, token, "kv: no replica named '" + args[0] + "'");
    answer(self, token, admin::kv_json({st.replicas[*i]}));
  });
}

// `requests [REPLICA]`: the oldest requests in flight
void cmd_requests(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& args) {
  if (args.size() > 1) return refuse(self, token, "requests: expected at most one replica name");
  return refresh(self, [=] {
    auto& st = self->state;
    std::optional<std::size_t> only;
    if (!args.empty()) {
      only = admin::find_replica(st.replicas, args[0]);
      if (!only) return refuse(self, token, "requests: no replica named '" + args[0] + "'");
    }
    self->request(st.cfg.owner, st.cfg.timeout, requests_atom::value, std::uint32_t(max_listed))
        .then(
            [=](const std::vector<request_view>& views) {
              auto& st = self->state;
              nlohmann::json list = nlohmann::json::array();
              for (const auto& v : views) {
                if (only && v.replica.value != st.replicas[*only].id) continue;
                const bool placed = v.replica.value < st.replicas.size();
                list.push_back({{"id", v.id},
                                {"replica", placed ? nlohmann::json(st.replicas[v.replica.value].name) : nlohmann::json(nullptr)},
                                {"prompt_tokens", v.prompt_tokens},
                                {"output_tokens", v.output_tokens},
                                {"migrations", v.migrations},
                                {"priority", v.priority},
                                {"age_seconds", v.age_seconds}});
              }
              answer(self, token, {{"requests", list}, {"listed_at_most", max_listed}});
            },
            [=](caf::error& e) { refuse(self, token, "requests: the request owner did not answer: " + error_message(self->system(), e)); });
  });
}

// `scale POOL N`: the pool's replica count
void cmd_scale(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  int n = -1;
  try {
    std::size_t used = 0;
    if (args.size() == 2) n = std::stoi(args[1], &used);
    if (used != args[1].size()) n = -1;
  } catch (const std::exception&) {
    n = -1;
  }
  if (args.size() != 2 || n < 0) return refuse(self, token, "scale: expected POOL N (a replica count)");
  emit(self, "admin", {{"command", cmd}, {"pool", args[0]}, {"replicas", n}});
  return scale_pool(self, args[0], n, "admin", [=](bool ok, nlohmann::json r) {
    if (ok) return answer(self, token, std::move(r));
    refuse(self, token, r.get<std::string>());
  });
}

// `log-level [LEVEL]`: the head's and every node's
void cmd_log_level(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto& st = self->state;
  if (args.size() > 1) return refuse(self, token, "log-level: expected one of debug, info, warn, error, off");
  if (args.empty()) return answer(self, token, {{"level", log::level_name(log::current_level())}});
  const auto l = log::parse_level(args[0]);
  if (!l) return refuse(self, token, "log-level: '" + args[0] + "' is not one of debug, info, warn, error, off");
  emit(self, "admin", {{"command", cmd}, {"level", args[0]}});
  log::set_level(*l);
  const std::string name = log::level_name(*l);
  if (!st.cfg.registry) return answer(self, token, {{"level", name}, {"applies_to", "the head"}});
  self->request(st.cfg.registry, st.cfg.timeout, log_level_atom::value, name)
      .then([=](std::uint32_t nodes) { answer(self, token, {{"level", name}, {"applies_to", "the head"}, {"nodes", nodes}}); },
            [=](caf::error& e) {
              answer(self, token, {{"level", name}, {"applies_to", "the head"}, {"nodes_error", error_message(self->system(), e)}});
            });
  return;
}

// `set-policy router NAME [KEY=VALUE ...]`
void cmd_set_router_policy(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto& st = self->state;
  if (args.size() < 2) return refuse(self, token, "set-policy: expected router|autoscaler NAME [KEY=VALUE ...]");
  if (args[0] != "router") return refuse(self, token, "set-policy: expected router or autoscaler, got '" + args[0] + "'");
  std::vector<std::pair<std::string, double>> params;
  if (auto bad = admin::parse_key_numbers(args, 2, params)) return refuse(self, token, "set-policy: " + *bad);
  const std::string name = args[1];
  self->request(st.cfg.router, st.cfg.timeout, policy_atom::value, name, params)
      .then([=](bool) {
              nlohmann::json p = nlohmann::json::object();
              for (const auto& [k, v] : params) p[k] = v;
              emit(self, "admin", {{"command", cmd}, {"policy", name}, {"params", p}});
              answer(self, token, {{"router", {{"policy", name}, {"params", p}}}});
            },
            [=](caf::error& e) { refuse(self, token, "set-policy router: " + error_message(self->system(), e)); });
  return;
}

// `kill NODE`: a whole node's process, as if it crashed
void cmd_kill_node(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& args) {
  auto& st = self->state;
  const std::string node = args[0];  // a whole node's process, as if it crashed
  if (st.cfg.topo.is_head(node)) return refuse(self, token, "kill: " + node + " is a head (this console runs there); kill its replicas instead");
  if (!st.cfg.registry) return refuse(self, token, "kill: this head has no node registry");
  self->request(st.cfg.registry, st.cfg.timeout, crash_atom::value, node)
      .then(
          [=](bool) {
            emit(self, "admin", {{"command", "kill"}, {"node", node}});
            answer(self, token, {{"node", node}, {"killed", true}});
          },
          [=](caf::error& e) { refuse(self, token, "kill " + node + ": " + error_message(self->system(), e)); });
  return;
}

// `drain|resume|kill REPLICA`
void cmd_replica(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  return refresh(self, [=] {
    auto& st = self->state;
    std::size_t i = 0;
    if (!named_replica(self, token, cmd, args, i)) return;
    const auto& r = st.replicas[i];
    const replica_id id{r.id};
    const std::string name = r.name;
    emit(self, "admin", {{"command", cmd}, {"replica", name}});
    if (cmd == "kill") {  // as if its process died: no goodbye, its requests migrate
      // An error exit, not exit_reason::kill: kill would pass on through the links to the
      // node agent and every other replica of that process; a crash of one replica is this.
      self->send_exit(st.schedulers[i], caf::make_error(caf::sec::runtime_error, "killed by the admin console (fault injection)"));
      return answer(self, token, {{"replica", name}, {"killed", true}});
    }
    if (cmd == "resume") {
      self->send(st.cfg.router, resume_atom::value, id);
      self->send(st.schedulers[i], resume_atom::value);
      announce(self, i, "running");
      return answer(self, token, {{"replica", name}, {"state", "running"}});
    }
    drain(self, i, [=](std::optional<std::string> error) {
      if (error) return refuse(self, token, "drain " + name + ": " + *error);
      announce(self, i, "drained");
      answer(self, token, {{"replica", name}, {"state", "drained"}, {"safe_to_remove", true}});
    });
  });
}

// `slow REPLICA MS`: fault injection, each step of the replica waits MS first (0 ends it)
void cmd_slow(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  int ms = -1;
  try {
    std::size_t used = 0;
    if (args.size() == 2) ms = std::stoi(args[1], &used);
    if (used != args[1].size() || ms > 60000) ms = -1;
  } catch (const std::exception&) {
    ms = -1;
  }
  if (args.size() != 2 || ms < 0) return refuse(self, token, "slow: expected REPLICA MS (0 to 60000 milliseconds before each step)");
  refresh(self, [=] {
    std::size_t i = 0;
    if (!named_replica(self, token, cmd, {args[0]}, i)) return;
    emit(self, "admin", {{"command", cmd}, {"replica", args[0]}, {"delay_ms", ms}});
    self->send(self->state.schedulers[i], slow_atom::value, std::int32_t(ms));
    answer(self, token, {{"replica", args[0]}, {"delay_ms", ms}});
  });
}

// `lora [list]`, `lora load NAME DIR`, `lora unload NAME`: the head's adapters, and changing
// them on every replica (as /v1/load_lora_adapter does) when the topology allows.
void cmd_lora(admin_ptr self, std::uint64_t token, const std::string& /*cmd*/, const std::vector<std::string>& args) {
  const auto& lora = self->state.cfg.lora;
  if (!lora.catalog) return refuse(self, token, "lora: this topology serves no adapters (no [lora] section)");
  const std::string verb = args.empty() ? "list" : args[0];
  if (verb == "list" && args.size() <= 1) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : lora.catalog->list())
      out.push_back({{"name", a.name}, {"identity", a.identity}, {"dir", a.dir}, {"from", a.from_topology ? "topology" : "runtime"}});
    return answer(self, token, {{"adapters", out}, {"max_adapters", lora.catalog->max_adapters()}, {"runtime_loading", lora.runtime_loading}});
  }
  const bool load = verb == "load" && args.size() == 3, unload = verb == "unload" && args.size() == 2;
  if (!load && !unload) return refuse(self, token, "lora: expected 'lora list', 'lora load NAME DIR' or 'lora unload NAME'");
  if (!lora.runtime_loading) return refuse(self, token, "lora " + verb + ": loading adapters at run time is off ([lora] runtime_loading = true turns it on)");
  auto done = [=](const std::string& identity) {
    emit(self, "admin", {{"command", "lora " + verb}, {"adapter", identity}});
    answer(self, token, {{"adapter", args[1]}, {"identity", identity}, {"loaded", load}});
  };
  auto failed = [=](caf::error& e) { refuse(self, token, "lora " + verb + " " + args[1] + ": " + error_message(self->system(), e)); };
  const auto timeout = self->state.cfg.topo.timeouts.request;
  if (load)
    self->request(lora.manager, timeout, lora_atom::value, args[1], args[2]).then(done, failed);
  else
    self->request(lora.manager, timeout, lora_atom::value, args[1]).then(done, failed);
}

void run_command(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto& st = self->state;
  if (cmd == "help") return cmd_help(self, token, cmd, args);
  if (cmd == "topology") return cmd_topology(self, token, cmd, args);
  if (cmd == "status") return cmd_status(self, token, cmd, args);
  if (cmd == "autoscaler" || (cmd == "set-policy" && !args.empty() && args[0] == "autoscaler")) return cmd_autoscaler(self, token, cmd, args);
  if (cmd == "kv") return cmd_kv(self, token, cmd, args);
  if (cmd == "requests") return cmd_requests(self, token, cmd, args);
  if (cmd == "scale") return cmd_scale(self, token, cmd, args);
  if (cmd == "swap") return cmd_swap(self, token, cmd, args);
  if (cmd == "rollout" || cmd == "rollback") return cmd_rollout(self, token, cmd, args);
  if (cmd == "log-level") return cmd_log_level(self, token, cmd, args);
  if (cmd == "lora") return cmd_lora(self, token, cmd, args);
  if (cmd == "set-policy") return cmd_set_router_policy(self, token, cmd, args);
  if (cmd == "kill" && args.size() == 1 && !admin::find_replica(st.replicas, args[0]) && st.cfg.topo.node(args[0])) return cmd_kill_node(self, token, cmd, args);
  if (cmd == "drain" || cmd == "resume" || cmd == "kill") return cmd_replica(self, token, cmd, args);
  if (cmd == "slow") return cmd_slow(self, token, cmd, args);
  refuse(self, token, "unknown command '" + cmd + "' (help lists them)");
}

}  // namespace


admin_actor::behavior_type admin(admin_actor::stateful_pointer<admin_state> self, admin_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.replicas = placed_replicas(self->state.cfg.topo);
  self->state.schedulers.assign(self->state.replicas.size(), scheduler_actor{});
  self->state.start_ns = std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  self->send(self, tick_atom::value);
  const auto sink = caf::actor_cast<admin_event_sink>(self);
  if (self->state.cfg.router) self->send(self->state.cfg.router, watch_atom::value, sink);
  if (self->state.cfg.owner) self->send(self->state.cfg.owner, watch_atom::value, sink);
  return {
      [=](admin_atom, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
        run_command(self, token, cmd, args);
      },
      [=](event_atom, const admin::replica_changed&) { refresh(self, [] {}); },  // announces the change now
      [=](event_atom, const admin::placement_event& e) { publish(self, e); },
      [=](event_atom, const admin::admission_event& e) { publish(self, e); },
      [=](event_atom, const admin::migration_event& e) { publish(self, e); },
      [=](signals_atom, std::chrono::milliseconds fresh) -> caf::result<pool_signal_map> {
        auto rp = self->make_response_promise<pool_signal_map>();
        gather(self, [=]() mutable {
          rp.deliver(autoscale::signals_of(self->state.replicas, pool_bounds(self->state.cfg.topo), self->state.latency, fresh));
        });
        return rp;
      },
      [=](scale_atom, const std::string& pool, std::int32_t n, const std::string& reason) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        scale_pool(self, pool, n, reason, [rp](bool ok, nlohmann::json r) mutable {
          if (ok)
            rp.deliver(true);
          else
            rp.deliver(caf::make_error(caf::sec::invalid_argument, r.get<std::string>()));
        });
        return rp;
      },
      [=](autoscaler_atom, autoscaler_actor a) { self->state.autoscaler = std::move(a); },
      [=](tick_atom) {  // samples loads (tokens/s) and notices deaths and restarts for `watch`
        refresh(self, [=] {
          guard_drains(self);
          rollout_tick(self);  // canaries judged on fresh revisions
        });
        self->delayed_send(self, self->state.cfg.sample_interval, tick_atom::value);
      },
  };
}

}  // namespace troupe::actors
