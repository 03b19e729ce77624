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

std::string name_of(const router_config& cfg, replica_id r) { return topology::name_of(cfg.names, r.value); }

namespace {

using router_ptr = router_actor::stateful_pointer<router_state>;

// Records the decision's time however the route handler returns (bounded).
struct decision_timer {
  router_state& st;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~decision_timer() {
    st.decision_ns.push(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};

// A replica or store that went down is never chosen again until it registers anew.
void on_down(router_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i)
    if (st.replicas[i] && st.replicas[i].address() == dm.source) {
      const replica_id r = st.book.loads()[i].replica;
      log::warn("replica_down", {{"replica", name_of(st.cfg, r)}, {"reason", caf::to_string(dm.reason)}});
      if (st.events) self->send(st.events, event_atom::value, admin::replica_changed{r, false});
      st.book.down(i);
      st.replicas[i] = nullptr;
      st.index.drop(r);  // its blocks died with it
    }
  for (auto it = st.stores.begin(); it != st.stores.end();)
    if (it->second.address() == dm.source) {
      st.index.drop(it->first);
      it = st.stores.erase(it);
    } else {
      ++it;
    }
}

// Where a request's block hashes start: its model's key, and its adapter's identity.
// A model's root is hashed once, at start (model_roots); only an adapter's is hashed per request.
kv::block_hash root_of(const router_state& st, const route_query& q) {
  if (!q.adapter.empty()) return kv::root_hash(st.cfg.model_key, q.adapter);  // adapters are [model]'s alone
  auto root = st.model_roots.find(q.model);
  return root == st.model_roots.end() ? st.root : root->second;
}

// The decision is routing::place's; this turns its slot and store into actor handles and counts
// the placement where the next decision sees it.
route_reply route(router_ptr self, const route_query& q) {
  auto& st = self->state;
  decision_timer timing{st};
  routing::placement_query pq{q.prompt_tokens, q.priority, q.avoid, q.decode, {}, q.model};
  routing::placement_context c;
  auto split = q.adapter.empty() ? st.splits.find(q.model) : st.splits.end();
  if (split != st.splits.end()) {  // a canary rollout: the sender's side, and the canary's blocks under its key
    pq.canary = q.split_side >= 0 ? q.split_side == 1 : routing::canary_side(q.user, split->second.share);
    c.split = &split->second;
    c.revisions = &st.revisions;
  } else if (q.split_side >= 0 && !st.splits.count(q.model) && q.avoid == no_replica && !q.decode) {
    route_reply r;  // a replay that means to measure one side must not measure the whole pool unawares
    r.why = "X-Troupe-Split: no canary rollout of model '" + (q.model.empty() ? std::string("[model]") : q.model) + "' is under way";
    return r;
  }
  if (st.kv_aware || !st.stores.empty())  // where this request's prefix is cached, as far as the index knows
    pq.hashes = routing::prompt_block_hashes(q.tokens, st.cfg.block_size, pq.canary.value_or(false) ? st.split_roots[q.model] : root_of(st, q),
                                             q.cache_salt, q.public_prefix);
  c.loads = st.book.loads();
  c.roles = &st.cfg.roles;
  c.models = st.cfg.models.empty() ? nullptr : &st.cfg.models;
  // Suspect replicas are passed over while another can take the request.
  c.held_back = [&st](replica_id r) { return st.book.held_back(r) || st.book.suspect(r); };
  c.any_held_back = st.book.any_held_back() || st.book.any_suspect();
  c.index = &st.index;
  c.kv_aware = st.kv_aware;
  for (const auto& [id, store] : st.stores) c.stores.push_back(id);
  c.choose = &st.policy;
  c.params = &st.cfg.params;
  c.decision_index = st.decisions++;
  c.block_size = st.cfg.block_size;
  c.disaggregation = st.cfg.disaggregation;
  routing::placement p = routing::place(c, pq);
  if (!p.slot && st.book.any_suspect()) {  // only suspect ones can: better slow than refused
    c.held_back = [&st](replica_id r) { return st.book.held_back(r); };
    c.any_held_back = st.book.any_held_back();
    p = routing::place(c, pq);
  }
  if (!p.reason.empty() && st.reasons.size() < 64) ++st.reasons[p.reason];
  route_reply r;
  r.prefill_only = p.prefill_only;
  r.why = p.why;
  if (!p.slot) return r;
  const std::size_t i = *p.slot;
  r.placed = true;
  r.replica = st.book.loads()[i].replica;
  r.scheduler = st.replicas[i];
  routing::count_placement(st.book.load(i), q.prompt_tokens, p.cached_tokens);
  // And expect its blocks there: the next request with this prefix should follow it before the
  // replica's events say so.
  if (st.kv_aware) st.index.predict(r.replica, pq.hashes);
  if (p.store) {
    r.store = st.stores.at(*p.store);
    r.store_hashes.assign(pq.hashes.begin(), pq.hashes.begin() + p.store_blocks);
  }
  return r;
}

// A replica started after adapters were loaded at run time loads them too (each is read from
// its folder on the replica's host; one that fails there is logged, and that replica refuses
// requests for it by name).
void give_runtime_adapters(router_ptr self, replica_id replica, const scheduler_actor& s) {
  if (!self->state.cfg.loras) return;
  const std::string name = name_of(self->state.cfg, replica);
  for (const auto& a : self->state.cfg.loras->list()) {
    if (a.from_topology) continue;
    self->request(s, self->state.cfg.request_timeout, lora_atom::value, a.name, a.dir)
        .then([](const std::string&) {},
              [self, name, a](caf::error& e) {
                log::warn("lora_load_failed", {{"replica", name}, {"adapter", a.identity}, {"why", self->system().render(e)}});
              });
  }
}

// A replica (re)registers: a fresh slot state, its events subscribed; answered once the router
// holds what the replica already computed, so a route sent after the answer sees it.
void on_report(router_state& st, replica_id replica, const load_report& r);

caf::result<bool> register_replica(router_ptr self, replica_id replica, scheduler_actor s) {
  auto& st = self->state;
  const std::size_t i = st.book.enroll(replica);
  st.replicas.resize(st.book.size());
  self->monitor(s);
  st.replicas[i] = s;
  st.book.heard(replica, std::chrono::steady_clock::now());
  st.index.drop(replica);  // an earlier life's blocks are not this one's
  log::info("replica_registered", {{"replica", name_of(st.cfg, replica)}, {"generation", st.book.generation(replica)}});
  if (st.events) self->send(st.events, event_atom::value, admin::replica_changed{replica, true});
  give_runtime_adapters(self, replica, s);  // before the subscription: the replica takes them first
  auto answered = self->make_response_promise<bool>();
  // Answered once its KV is followed and its first load report (its revision) is in.
  subscribe_kv(self, replica, s, [=]() mutable {
    self->request(s, self->state.cfg.request_timeout, load_atom::value)
        .then([=](const load_report& r) mutable { on_report(self->state, replica, r), answered.deliver(true); },
              [=](caf::error&) mutable { answered.deliver(true); });
  });
  return answered;
}

// A replica's or store's KV events into the prefix index (a gap: its whole state asked again),
// and on to the topology's KV event publisher.
void on_kv_events(router_ptr self, const kv::kv_event_batch& b) {
  auto& st = self->state;
  ++st.stats.kv_batches;
  const auto slot = st.book.slot(b.replica);
  const bool known = slot && st.book.loads()[*slot].alive;
  const auto store = st.stores.find(b.replica);
  if (!known && store == st.stores.end()) {  // not (or no longer) registered here
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
        subscribe_kv(self, b.replica, st.replicas[*slot]);
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
    if (st.book.loads()[i].alive && st.replicas[i]) live.push_back(st.replicas[i]);
  return live;
}

void resume(router_state& st, replica_id replica) {
  if (st.book.resume(replica, std::chrono::steady_clock::now())) log::info("replica_unparked", {{"replica", name_of(st.cfg, replica)}});
}

void park(router_state& st, replica_id replica) {
  if (st.book.park(replica, std::chrono::steady_clock::now())) log::info("replica_parked", {{"replica", name_of(st.cfg, replica)}});
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
  const auto i = st.book.retire(replica);
  if (!i) return false;
  if (st.replicas[*i]) self->demonitor(st.replicas[*i].address());
  st.replicas[*i] = nullptr;
  st.index.drop(replica);
  log::info("replica_retired", {{"replica", name_of(st.cfg, replica)}});
  return true;
}

std::vector<replica_view> view_of(router_state& st) {
  std::vector<replica_view> out;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    const replica_id r = st.book.loads()[i].replica;
    out.push_back({r, st.replicas[i], st.book.loads()[i].alive && st.replicas[i], st.book.draining(r), st.book.generation(r),
                   st.book.parked(r), st.book.stopped(r), st.book.suspect(r)});
  }
  return out;
}

void add_store(router_ptr self, replica_id id, kv_store_actor store) {
  self->monitor(store);
  self->state.stores[id] = store;
  self->state.index.drop(id);
  subscribe_kv(self, id, store);
}

// A replica's load report: its figures, and its draining and parked flags unless this router was
// told otherwise lately (a drain or park another head's console made).
void on_report(router_state& st, replica_id replica, const load_report& r) {
  st.book.heard(replica, std::chrono::steady_clock::now());
  if (!r.model_key.empty()) {  // every poll carries it; it changes only with a new replica
    auto& key = st.revisions[replica];
    if (key != r.model_key) key = r.model_key;
  }
  const routing::replica_report rep{r.running_seqs, r.waiting_prompt_tokens, r.used_blocks, r.total_blocks, r.draining, r.parked};
  if (const auto parked = st.book.report(replica, rep, std::chrono::steady_clock::now()))
    // Learnt from the replica, not told here: another head's console, or a replica that came back
    // with its own state (a restart, a rejoin after a cut link). Which, this router cannot tell.
    log::info(*parked ? "replica_parked" : "replica_unparked", {{"replica", name_of(st.cfg, replica)}, {"from", "its load report"}});
}

// A canary rollout's split of a model's senders, or its end (a share of 0)
void set_split(router_state& st, const std::string& model, const std::string& key, double share) {
  if (share <= 0 || key.empty()) {
    st.splits.erase(model);
    st.split_roots.erase(model);
    return;
  }
  st.splits[model] = {key, std::min(share, 1.0)};
  st.split_roots[model] = kv::root_hash(key);
}

// A swap's new key for a model's prompts (its replicas publish blocks rooted in it now)
void set_model_key(router_state& st, const std::string& model, const std::string& key) {
  if (model.empty()) {
    st.cfg.model_key = key;
    st.root = kv::root_hash(key);
    return;
  }
  st.cfg.model_keys[model] = key;
  st.model_roots[model] = kv::root_hash(key);
}

// Asks every replica for its load, and again after the poll interval.
void poll(router_ptr self) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size(); ++i) {
    if (!st.replicas[i]) continue;
    const replica_id replica = st.book.loads()[i].replica;
    self->request(st.replicas[i], st.cfg.request_timeout, load_atom::value)
        .then([=](const load_report& r) { on_report(self->state, replica, r); },
              [](caf::error&) {});  // a dead replica is handled by its down message
  }
  self->delayed_send(self, st.cfg.poll_interval, poll_atom::value);
  for (const auto& [replica, suspect] : st.book.judge(std::chrono::steady_clock::now(), st.cfg.suspect_after)) {
    if (suspect)
      log::warn("replica_suspect", {{"replica", name_of(st.cfg, replica)},
                                    {"silent_for_more_than_s", std::chrono::duration<double>(st.cfg.suspect_after).count()}});
    else
      log::info("replica_trusted", {{"replica", name_of(st.cfg, replica)}});
  }
}

}  // namespace

router_actor::behavior_type router(router_actor::stateful_pointer<router_state> self, router_config cfg) {
  self->state.policy = routing::registry::global().get(cfg.policy);
  self->state.kv_aware = cfg.policy == "kv_aware";
  self->state.cfg = std::move(cfg);
  self->state.book = routing::replica_registry(self->state.cfg.parked);
  self->state.root = kv::root_hash(self->state.cfg.model_key);
  for (const auto& [model, key] : self->state.cfg.model_keys) self->state.model_roots[model] = kv::root_hash(key);
  self->set_down_handler([=](const caf::down_msg& dm) { on_down(self, dm); });
  self->send(self, poll_atom::value);
  return {
      [=](route_atom, const route_query& q) { return route(self, q); },
      [=](replica_atom, replica_id replica, scheduler_actor s) { return register_replica(self, replica, std::move(s)); },
      [=](progress_atom, replica_id replica, std::int32_t prompt_tokens, bool finished) {
        self->state.book.progress(replica, prompt_tokens, finished);
      },
      [=](kv::kv_event_batch& b) { on_kv_events(self, b); },
      [=](router_stats_atom) { return stats_of(self->state); },
      [=](timing_atom) { return self->state.decision_ns.items(); },
      [=](replicas_atom) { return live_replicas(self->state); },
      [=](live_atom) { return self->state.book.placeable(); },
      [=](drain_atom, replica_id replica) { self->state.book.drain(replica, std::chrono::steady_clock::now()); },
      [=](resume_atom, replica_id replica) { resume(self->state, replica); },
      [=](park_atom, replica_id replica) { park(self->state, replica); },
      [=](watch_atom, admin_event_sink sink) { self->state.events = std::move(sink); },
      [=](policy_atom, const std::string& name, const std::vector<std::pair<std::string, double>>& params) {
        return set_policy(self->state, name, params);
      },
      [=](retire_atom, replica_id replica) { return retire(self, replica); },
      [=](view_atom) { return view_of(self->state); },
      [=](model_key_atom, const std::string& model, const std::string& key) { set_model_key(self->state, model, key); },
      [=](canary_atom, const std::string& model, const std::string& key, double share) { set_split(self->state, model, key, share); },
      [=](store_atom, replica_id id, kv_store_actor store) { add_store(self, id, std::move(store)); },
      [=](poll_atom) { poll(self); },
  };
}

}  // namespace troupe::actors
