#include "actors/serving/router_actor.h"

#include "runtime/common/log.h"

#include <algorithm>

namespace troupe::actors {

void register_router_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<route_query>("troupe.route_query");
  cfg.add_message_type<route_reply>("troupe.route_reply");
  cfg.add_message_type<scheduler_actor>("troupe.scheduler_actor");
  cfg.add_message_type<std::vector<std::int64_t>>("troupe.int64s");
  cfg.add_message_type<std::vector<scheduler_actor>>("troupe.scheduler_actors");
  cfg.add_message_type<router_stats>("troupe.router_stats");
  cfg.add_message_type<replica_view>("troupe.replica_view");
  cfg.add_message_type<std::vector<replica_view>>("troupe.replica_views");
  cfg.add_message_type<std::vector<std::pair<std::string, double>>>("troupe.named_doubles");
  cfg.add_message_type<std::vector<std::pair<std::string, std::uint64_t>>>("troupe.named_counts");
}

namespace {

std::size_t slot_of(router_actor::stateful_pointer<router_state> self, replica_id replica) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.loads.size(); ++i)
    if (st.loads[i].replica == replica) return i;
  st.loads.push_back({replica, false, 0, 0, 0, 0});
  st.replicas.emplace_back();
  return st.loads.size() - 1;
}

// Asks replica (or store) `replica` for its KV events from now on and for what it holds now.
// `then` runs once the snapshot is in the index (or the request failed).
template <class Handle>
void subscribe_kv(router_actor::stateful_pointer<router_state> self, replica_id replica, const Handle& s,
                  std::function<void()> then = {}) {
  self->request(s, self->state.cfg.request_timeout, kv_subscribe_atom::value, replica, caf::actor_cast<kv_event_sink>(self))
      .then(
          [=](const kv_snapshot& snap) {
            self->state.index.reset(replica, snap.generation, snap.seq, snap.hashes);
            if (then) then();
          },
          [=](caf::error&) {  // a dead replica is handled by its down message
            if (then) then();
          });
}

}  // namespace

// Placed on by nobody now: draining, or parked in the warm pool.
bool held_back(const router_state& st, replica_id r) {
  return st.draining.count(r) || st.parked.count(r) || st.reported_draining.count(r);
}

std::string name_of(const router_config& cfg, replica_id r) { return topology::name_of(cfg.names, r.value); }

namespace {

using router_ptr = router_actor::stateful_pointer<router_state>;

// Records the decision's time however the route handler returns (bounded).
struct decision_timer {
  router_state& st;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~decision_timer() {
    if (st.decision_ns.size() >= 100000) st.decision_ns.erase(st.decision_ns.begin(), st.decision_ns.begin() + 50000);
    st.decision_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};

// A replica or store that went down is never chosen again until it registers anew.
void on_down(router_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i)
    if (st.replicas[i] && st.replicas[i].address() == dm.source) {
      log::warn("replica_down", {{"replica", name_of(st.cfg, st.loads[i].replica)}, {"reason", caf::to_string(dm.reason)}});
      if (st.events)
        self->send(st.events, event_atom::value, std::string("replica_down"),
                   "{\"replica\": " + std::to_string(st.loads[i].replica.value) + "}");
      st.loads[i].alive = false;
      st.replicas[i] = nullptr;
      st.index.drop(st.loads[i].replica);  // its blocks died with it
    }
  for (auto it = st.stores.begin(); it != st.stores.end();)
    if (it->second.address() == dm.source) {
      st.index.drop(it->first);
      it = st.stores.erase(it);
    } else {
      ++it;
    }
}

// The decision is routing::place's; this turns its slot and store into actor handles and counts
// the placement where the next decision sees it.
route_reply route(router_ptr self, const route_query& q) {
  auto& st = self->state;
  decision_timer timing{st};
  routing::placement_query pq{q.prompt_tokens, q.priority, q.avoid, q.decode, {}};
  if (st.kv_aware || !st.stores.empty())  // where this request's prefix is cached, as far as the index knows
    pq.hashes = routing::prompt_block_hashes(q.tokens, st.cfg.block_size, st.root, q.cache_salt,
                                             q.public_prefix);
  routing::placement_context c;
  c.loads = st.loads;
  c.roles = &st.cfg.roles;
  c.held_back = [&st](replica_id r) { return held_back(st, r); };
  c.any_held_back = !st.draining.empty() || !st.parked.empty() || !st.reported_draining.empty();
  c.index = &st.index;
  c.kv_aware = st.kv_aware;
  for (const auto& [id, store] : st.stores) c.stores.push_back(id);
  c.choose = &st.policy;
  c.params = &st.cfg.params;
  c.decision_index = st.decisions++;
  c.block_size = st.cfg.block_size;
  c.disaggregation = st.cfg.disaggregation;
  const routing::placement p = routing::place(c, pq);
  if (!p.reason.empty() && st.reasons.size() < 64) ++st.reasons[p.reason];
  route_reply r;
  r.prefill_only = p.prefill_only;
  r.why = p.why;
  if (!p.slot) return r;
  const std::size_t i = *p.slot;
  r.placed = true;
  r.replica = st.loads[i].replica;
  r.scheduler = st.replicas[i];
  routing::count_placement(st.loads[i], q.prompt_tokens, p.cached_tokens);
  // And expect its blocks there: the next request with this prefix should follow it before the
  // replica's events say so.
  if (st.kv_aware) st.index.predict(r.replica, pq.hashes);
  if (p.store) {
    r.store = st.stores.at(*p.store);
    r.store_hashes.assign(pq.hashes.begin(), pq.hashes.begin() + p.store_blocks);
  }
  return r;
}

// A replica (re)registers: a fresh slot state, its events subscribed; answered once the router
// holds what the replica already computed, so a route sent after the answer sees it.
caf::result<bool> register_replica(router_ptr self, replica_id replica, scheduler_actor s) {
  auto& st = self->state;
  const std::size_t i = slot_of(self, replica);
  self->monitor(s);
  st.replicas[i] = s;
  st.loads[i] = {replica, true, 0, 0, 0, 0};
  st.index.drop(replica);  // an earlier life's blocks are not this one's
  st.draining.erase(replica);
  st.reported_draining.erase(replica);
  st.stopped.erase(replica);
  ++st.registrations[replica];
  log::info("replica_registered", {{"replica", name_of(st.cfg, replica)}, {"generation", st.registrations[replica]}});
  if (st.events)
    self->send(st.events, event_atom::value, std::string("replica_up"), "{\"replica\": " + std::to_string(replica.value) + "}");
  auto answered = self->make_response_promise<bool>();
  subscribe_kv(self, replica, s, [answered]() mutable { answered.deliver(true); });
  return answered;
}

// A request's prompt computed (or the request finished) on `replica`, before its next report.
void on_progress(router_state& st, replica_id replica, std::int32_t prompt_tokens, bool finished) {
  for (auto& l : st.loads)
    if (l.replica == replica && l.alive) {
      l.waiting_prompt_tokens = std::max(0, l.waiting_prompt_tokens - prompt_tokens);
      if (finished) l.running_seqs = std::max(0, l.running_seqs - 1);
    }
}

// A replica's or store's KV events into the prefix index (a gap: its whole state asked again),
// and on to the topology's KV event publisher.
void on_kv_events(router_ptr self, const kv::kv_event_batch& b) {
  auto& st = self->state;
  ++st.stats.kv_batches;
  const auto known = std::find_if(st.loads.begin(), st.loads.end(), [&](const routing::replica_load& l) {
    return l.alive && l.replica == b.replica;
  });
  const auto store = st.stores.find(b.replica);
  if (known == st.loads.end() && store == st.stores.end()) {  // not (or no longer) registered here
    ++st.stats.kv_stale;
    return;
  }
  switch (st.index.apply(b)) {
    case routing::prefix_index::outcome::applied:
      break;
    case routing::prefix_index::outcome::stale:
      ++st.stats.kv_stale;
      return;
    case routing::prefix_index::outcome::gap:  // ask for everything again
      ++st.stats.kv_gaps;
      if (store != st.stores.end())
        subscribe_kv(self, b.replica, store->second);
      else
        subscribe_kv(self, b.replica, st.replicas[std::size_t(known - st.loads.begin())]);
      break;
  }
  if (st.cfg.publisher) st.cfg.publisher->publish(b);
}

router_stats stats_of(const router_state& st) {
  router_stats s = st.stats;
  for (auto& [reason, n] : st.reasons) s.decisions.emplace_back(reason, n);
  s.stores = st.stores.size();
  for (auto& [id, store] : st.stores) s.store_blocks += st.index.size(id);
  if (st.cfg.publisher) {
    s.events_published = st.cfg.publisher->events_published();
    s.events_dropped = st.cfg.publisher->events_dropped();
  }
  return s;
}

std::vector<scheduler_actor> live_replicas(const router_state& st) {
  std::vector<scheduler_actor> live;
  for (std::size_t i = 0; i < st.replicas.size(); ++i)
    if (st.loads[i].alive && st.replicas[i]) live.push_back(st.replicas[i]);
  return live;
}

std::uint32_t placeable_count(const router_state& st) {
  std::uint32_t n = 0;
  for (auto& l : st.loads) n += l.alive && !held_back(st, l.replica) ? 1 : 0;
  return n;
}

void drain(router_state& st, replica_id replica) {
  st.draining.insert(replica);
  st.told_at[replica] = std::chrono::steady_clock::now();
}

void resume(router_state& st, replica_id replica) {
  st.draining.erase(replica);
  st.reported_draining.erase(replica);
  st.told_at[replica] = std::chrono::steady_clock::now();
  if (st.parked.erase(replica)) log::info("replica_unparked", {{"replica", name_of(st.cfg, replica)}});
}

void park(router_state& st, replica_id replica) {
  st.draining.erase(replica);
  st.told_at[replica] = std::chrono::steady_clock::now();
  if (st.parked.insert(replica).second) log::info("replica_parked", {{"replica", name_of(st.cfg, replica)}});
}

// The admin console's `policy NAME k=v...`: refused by name unless the registry has the policy
// and it takes every parameter.
caf::result<bool> set_policy(router_state& st, const std::string& name, const std::vector<std::pair<std::string, double>>& params) {
  auto& reg = routing::registry::global();
  if (!reg.has(name)) {
    std::string known;
    for (const auto& n : reg.names()) known += (known.empty() ? "" : ", ") + n;
    return caf::make_error(caf::sec::invalid_argument, "no routing policy \"" + name + "\" (known: " + known + ")");
  }
  const auto& allowed = reg.params_of(name);
  routing::policy_params p;
  for (const auto& [k, v] : params) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      return caf::make_error(caf::sec::invalid_argument, "policy \"" + name + "\" takes no parameter \"" + k + "\"");
    p[k] = v;
  }
  st.policy = reg.get(name);
  st.cfg.policy = name;
  st.cfg.params = std::move(p);
  st.kv_aware = name == "kv_aware";
  log::info("routing_policy", {{"policy", name}, {"params", nlohmann::json(st.cfg.params)}});
  return true;
}

// Scaled down on purpose: stopped, not dead, and not watched any more.
bool retire(router_ptr self, replica_id replica) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i)
    if (st.loads[i].replica == replica && st.registrations.count(replica)) {  // alive, or its end seen first
      if (st.replicas[i]) self->demonitor(st.replicas[i].address());
      st.replicas[i] = nullptr;
      st.loads[i].alive = false;
      st.index.drop(replica);
      st.draining.erase(replica);
      st.stopped.insert(replica);
      log::info("replica_retired", {{"replica", name_of(st.cfg, replica)}});
      return true;
    }
  return false;
}

std::vector<replica_view> view_of(router_state& st) {
  std::vector<replica_view> out;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    const replica_id r = st.loads[i].replica;
    if (!st.registrations.count(r)) continue;  // a slot never filled
    out.push_back({r, st.replicas[i], st.loads[i].alive && st.replicas[i], st.draining.count(r) + st.reported_draining.count(r) > 0,
                   st.registrations[r], st.parked.count(r) > 0, st.stopped.count(r) > 0});
  }
  return out;
}

void add_store(router_ptr self, replica_id id, kv_store_actor store) {
  self->monitor(store);
  self->state.stores[id] = store;
  self->state.index.drop(id);
  subscribe_kv(self, id, store);
}

// A replica's load report: its figures, and its draining and parked flags when this router was
// not told otherwise within the last second (a drain or park another head's console made).
void on_report(router_state& st, replica_id replica, const load_report& r) {
  auto recent = [&] {
    auto told = st.told_at.find(replica);
    return told != st.told_at.end() && std::chrono::steady_clock::now() - told->second < std::chrono::seconds(1);
  };
  if (!r.draining)
    st.reported_draining.erase(replica);
  else if (!st.reported_draining.count(replica) && !recent())
    st.reported_draining.insert(replica);
  if (r.parked != (st.parked.count(replica) > 0) && !recent()) {
    if (r.parked)
      st.parked.insert(replica);
    else
      st.parked.erase(replica);
    log::info(r.parked ? "replica_parked" : "replica_unparked", {{"replica", name_of(st.cfg, replica)}, {"by", "another head"}});
  }
  for (auto& l : st.loads)
    if (l.replica == replica && l.alive) {
      l.running_seqs = r.running_seqs;
      l.waiting_prompt_tokens = r.waiting_prompt_tokens;
      l.free_blocks = r.total_blocks - r.used_blocks;
      l.total_blocks = r.total_blocks;
    }
}

// Asks every replica for its load, and again after the poll interval.
void poll(router_ptr self) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    if (!st.replicas[i]) continue;
    const replica_id replica = st.loads[i].replica;
    self->request(st.replicas[i], st.cfg.request_timeout, load_atom::value)
        .then([=](const load_report& r) { on_report(self->state, replica, r); },
              [](caf::error&) {});  // a dead replica is handled by its down message
  }
  self->delayed_send(self, st.cfg.poll_interval, poll_atom::value);
}

}  // namespace

router_actor::behavior_type router(router_actor::stateful_pointer<router_state> self, router_config cfg) {
  self->state.policy = routing::registry::global().get(cfg.policy);
  self->state.kv_aware = cfg.policy == "kv_aware";
  self->state.cfg = std::move(cfg);
  for (auto r : self->state.cfg.parked) self->state.parked.insert(replica_id(r));
  self->state.root = kv::root_hash(self->state.cfg.model_key);
  self->set_down_handler([=](const caf::down_msg& dm) { on_down(self, dm); });
  self->send(self, poll_atom::value);
  return {
      [=](route_atom, const route_query& q) { return route(self, q); },
      [=](replica_atom, replica_id replica, scheduler_actor s) { return register_replica(self, replica, std::move(s)); },
      [=](progress_atom, replica_id replica, std::int32_t prompt_tokens, bool finished) {
        on_progress(self->state, replica, prompt_tokens, finished);
      },
      [=](kv::kv_event_batch& b) { on_kv_events(self, b); },
      [=](router_stats_atom) { return stats_of(self->state); },
      [=](timing_atom) { return self->state.decision_ns; },
      [=](replicas_atom) { return live_replicas(self->state); },
      [=](live_atom) { return placeable_count(self->state); },
      [=](drain_atom, replica_id replica) { drain(self->state, replica); },
      [=](resume_atom, replica_id replica) { resume(self->state, replica); },
      [=](park_atom, replica_id replica) { park(self->state, replica); },
      [=](watch_atom, admin_event_sink sink) { self->state.events = std::move(sink); },
      [=](policy_atom, const std::string& name, const std::vector<std::pair<std::string, double>>& params) {
        return set_policy(self->state, name, params);
      },
      [=](retire_atom, replica_id replica) { return retire(self, replica); },
      [=](view_atom) { return view_of(self->state); },
      [=](store_atom, replica_id id, kv_store_actor store) { add_store(self, id, std::move(store)); },
      [=](poll_atom) { poll(self); },
  };
}

}  // namespace troupe::actors
