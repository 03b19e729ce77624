// The admin actor's shared moves (actors/control/admin_ops.h): replies, events, and the steps of
// a replica's life through the router and the node registry.
#include "actors/control/admin_ops.h"

#include <algorithm>
#include <memory>

#include "actors/protocol/error_text.h"
#include "runtime/common/log.h"
#include "runtime/common/wall_clock.h"

namespace troupe::actors {

namespace admin_ops {

void answer(admin_ptr self, std::uint64_t token, nlohmann::json result) {
  admin::reply r;
  r.ok = true;
  r.result = std::move(result);
  self->state.cfg.reply(token, std::move(r));
}

void refuse(admin_ptr self, std::uint64_t token, std::string why) {
  admin::reply r;
  r.ok = false;
  r.error = std::move(why);
  self->state.cfg.reply(token, std::move(r));
}

void emit(admin_ptr self, const std::string& kind, nlohmann::json fields) {
  if (kind == "admin" || kind == "replica_state" || kind == "swap" || kind == "rollout") {  // operators' actions and state changes go to the log too
    log::fields f;
    for (auto it = fields.begin(); it != fields.end(); ++it) f.emplace_back(it.key(), it.value());
    log::info(kind == "admin" ? "admin_command" : kind, f);
  }
  if (self->state.cfg.event) self->state.cfg.event(kind, std::move(fields));
}

// A serving actor's event, its replicas named, for `watch`.

// Tells `watch` that replica `i` is now in `state`, once per change (a refresh and a command
// may both notice it).
void announce(admin_ptr self, std::size_t i, const std::string& state) {
  auto& st = self->state;
  const auto& r = st.replicas[i];
  auto& last = st.announced[r.id];
  if (last.empty()) last = "starting";
  if (last == state) return;
  emit(self, "replica_state", {{"replica", r.name}, {"from", last}, {"to", state}, {"generation", r.generation}});
  last = state;
}

// The replicas of the topology, named "<pool>-<i>", before any has registered.
std::vector<admin::replica_status> placed_replicas(const topology::topology_config& topo) {
  std::vector<admin::replica_status> out;
  for (const auto& p : topology::place_replicas(topo)) {
    admin::replica_status r;
    r.id = p.replica.value;
    r.pool = p.pool;
    r.name = p.name;
    r.role = topology::role_name(p.role);
    r.node = p.node;
    r.stopped = !p.started;
    if (out.size() <= r.id) out.resize(r.id + 1);
    out[r.id] = r;
  }
  return out;
}

// Asks the router which replicas live and each live one for its load, then runs `then`.
// Replicas that do not answer within the timeout keep has_load false. Emits an event for every
// replica whose state changed since the last refresh.
void refresh(admin_ptr self, std::function<void()> then) {
  auto& st = self->state;
  self->request(st.cfg.router, st.cfg.timeout, view_atom::value)
      .then(
          [=](const std::vector<replica_view>& views) {
            auto& st = self->state;
            std::vector<std::uint32_t> generations;
            for (const auto& r : st.replicas) generations.push_back(r.generation);
            st.schedulers.assign(st.replicas.size(), scheduler_actor{});
            for (const auto& v : views) {
              if (v.replica.value >= st.replicas.size()) continue;  // not in this topology
              auto& r = st.replicas[v.replica.value];
              r.registered = true;
              r.alive = v.alive;
              r.draining = v.draining;
              r.parked = v.parked;
              r.stopped = v.stopped;
              if (v.alive) r.starting = false;
              r.generation = v.generation;
              if (v.alive) st.schedulers[v.replica.value] = v.scheduler;
            }
            auto pending = std::make_shared<std::size_t>(0);
            auto done = [=] {
              auto& st = self->state;
              for (std::size_t i = 0; i < st.replicas.size(); ++i) {
                const auto& r = st.replicas[i];
                if (generations[i] != 0 && r.generation > generations[i] && st.announced[r.id] == "running")
                  announce(self, i, "restarted");  // died and came back between two looks
                announce(self, i, admin::state_of(r));
              }
              then();
            };
            for (std::size_t i = 0; i < st.schedulers.size(); ++i) {
              auto& r = st.replicas[i];
              if (!st.schedulers[i]) r.load = {};  // dead or not yet here: no load to show
              r.has_load = false;
              if (st.schedulers[i]) ++*pending;
            }
            if (*pending == 0) return done();
            for (std::size_t i = 0; i < st.schedulers.size(); ++i) {
              if (!st.schedulers[i]) continue;
              auto finish = [=] {
                if (--*pending == 0) done();
              };
              self->request(st.schedulers[i], st.cfg.timeout, load_atom::value)
                  .then(
                      [=](const load_report& l) {
                        auto& r = self->state.replicas[i];
                        r.has_load = true;
                        const double rate = r.load.tokens_per_s;
                        r.load = {l.running_seqs, l.waiting_seqs, l.used_blocks, l.total_blocks, l.cached_blocks, l.handoffs_held,
                                  l.prefix_queries, l.prefix_hits, rate, l.spec_draft_tokens, l.spec_accepted_tokens, l.model_key};
                        // Tokens/s over the time since the previous sample (at least 0.2 s ago).
                        const double t = unix_seconds();
                        const bool fresh = r.sampled_at == 0 || l.generated_tokens < r.sampled_tokens;  // first, or restarted
                        if (fresh || t - r.sampled_at >= 0.2) {
                          if (!fresh) r.load.tokens_per_s = double(l.generated_tokens - r.sampled_tokens) / (t - r.sampled_at);
                          r.sampled_at = t;
                          r.sampled_tokens = l.generated_tokens;
                        }
                        finish();
                      },
                      [=](caf::error&) { finish(); });
            }
          },
          [=](caf::error&) { then(); });
}

// The replica `args[0]` names, alive, or an error reply (false).
bool named_replica(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args,
                   std::size_t& index) {
  auto& st = self->state;
  if (args.size() != 1) {
    refuse(self, token, cmd + ": expected one replica name (see status)");
    return false;
  }
  auto i = admin::find_replica(st.replicas, args[0]);
  if (!i) {
    std::string names;
    for (const auto& r : st.replicas) names += (names.empty() ? "" : ", ") + r.name;
    refuse(self, token, cmd + ": no replica named '" + args[0] + "' (replicas: " + names + ")");
    return false;
  }
  if (!st.schedulers[*i]) {
    refuse(self, token, cmd + ": replica " + args[0] + " is " + admin::state_of(st.replicas[*i]));
    return false;
  }
  index = *i;
  return true;
}

// Drains replica `i` (the router places nothing more on it; it hands what it holds on with the
// KV); `done` gets nothing once it is empty, or why it did not get there.
void drain(admin_ptr self, std::size_t i, std::function<void(std::optional<std::string>)> done) {
  auto& st = self->state;
  self->send(st.cfg.router, drain_atom::value, replica_id{st.replicas[i].id});
  announce(self, i, "draining");
  self->request(st.schedulers[i], st.cfg.drain_timeout, drain_atom::value)
      .then(
          [=](bool drained) {
            if (!drained) return done(std::string("resumed before it was drained"));
            done(std::nullopt);
          },
          [=](caf::error& e) { done(error_message(self->system(), e)); });
}

std::vector<admin::pool_bounds> pool_bounds(const topology::topology_config& t) {
  std::vector<admin::pool_bounds> out;
  for (const auto& p : t.pools) out.push_back({p.name, p.min_replicas, std::max(p.replicas, p.max_replicas), t.scheduler.limits.max_num_seqs, p.warm()});
  return out;
}

}  // namespace admin_ops

namespace admin_ops {

// Starts the stopped replicas `ids` through the node registry (each registers warm: parked),
// then runs `then` with the first failure, if any.
void start_replicas(admin_ptr self, const std::vector<std::size_t>& ids, std::function<void(std::optional<std::string>)> then) {
  if (ids.empty()) return then(std::nullopt);
  auto left = std::make_shared<std::size_t>(ids.size());
  auto failed = std::make_shared<std::optional<std::string>>();
  for (auto i : ids) {
    auto& r = self->state.replicas[i];
    r.stopped = false;
    r.starting = true;
    announce(self, i, "starting");
    log::info("replica_start", {{"replica", r.name}, {"node", r.node}});
    auto one_done = [=](std::optional<std::string> error) {
      auto& r = self->state.replicas[i];
      r.starting = false;
      if (error) {
        r.stopped = true;
        if (!*failed) *failed = "starting " + r.name + ": " + *error;
        log::warn("replica_start_failed", {{"replica", r.name}, {"error", *error}});
      }
      if (--*left == 0) refresh(self, [=] { then(*failed); });  // the new handles, before anyone unparks them
    };
    self->request(self->state.cfg.registry, self->state.cfg.drain_timeout, spawn_replica_atom::value, replica_id{r.id})
        .then([=](bool) { one_done(std::nullopt); }, [=](caf::error& e) { one_done(error_message(self->system(), e)); });
  }
}

// Stops replica i through the node registry: the router forgets it, its node's agent stops it
// and frees its memory; `done` gets nothing, or why it could not.
void stop_replica(admin_ptr self, std::size_t i, std::function<void(std::optional<std::string>)> done) {
  const std::string name = self->state.replicas[i].name;
  log::info("replica_stop", {{"replica", name}});
  self->request(self->state.cfg.registry, self->state.cfg.timeout, stop_replica_atom::value, replica_id{self->state.replicas[i].id})
      .then([=](bool) { refresh(self, [=] { done(std::nullopt); }); },
            [=](caf::error& e) {
              const std::string why = error_message(self->system(), e);
              log::warn("replica_stop_failed", {{"replica", name}, {"error", why}});
              done(why);
            });
}

// Stops the warm replicas `ids` (their memory goes back to their nodes).
void stop_replicas(admin_ptr self, const std::vector<std::size_t>& ids) {
  for (auto i : ids) stop_replica(self, i, [](std::optional<std::string>) {});
}

// Places on warm replica i again.
void unpark(admin_ptr self, std::size_t i) {
  auto& st = self->state;
  self->send(st.cfg.router, resume_atom::value, replica_id{st.replicas[i].id});
  if (st.schedulers[i]) self->send(st.schedulers[i], park_atom::value, false);  // for the other heads' routers
  st.replicas[i].parked = false;  // as the router has it now (the warm pool counts on it)
  announce(self, i, "running");
}


pool_members members_of(admin_ptr self, const std::string& pool) {
  pool_members m;
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    const auto& r = st.replicas[i];
    if (r.pool != pool) continue;
    const std::string s = admin::state_of(r);
    if (s == "running" && st.schedulers[i]) m.serving.push_back(i);
    if (s == "warm" && st.schedulers[i]) m.warm.push_back(i);
    if (s == "stopped") m.stopped.push_back(i);
  }
  return m;
}

// Brings the pool's warm replicas to its warm_replicas: starts stopped ones, or stops the newest
// warm ones beyond it (their memory goes back to the node).
void keep_warm(admin_ptr self, const std::string& pool, int target) {
  if (!self->state.cfg.registry) return;  // nothing can start or stop replicas
  const pool_members m = members_of(self, pool);
  const int warm = int(m.warm.size());
  if (warm < target) {
    std::vector<std::size_t> ids(m.stopped.begin(), m.stopped.begin() + std::min<std::size_t>(m.stopped.size(), std::size_t(target - warm)));
    start_replicas(self, ids, [](std::optional<std::string>) {});
  } else if (warm > target) {
    stop_replicas(self, std::vector<std::size_t>(m.warm.end() - (warm - target), m.warm.end()));
  }
}

}  // namespace admin_ops

}  // namespace troupe::actors
