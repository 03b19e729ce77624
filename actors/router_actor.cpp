#include "actors/router_actor.h"

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

router_actor::behavior_type router(router_actor::stateful_pointer<router_state> self, router_config cfg) {
  self->state.policy = routing::registry::global().get(cfg.policy);
  self->state.kv_aware = cfg.policy == "kv_aware";
  self->state.cfg = std::move(cfg);
  for (auto r : self->state.cfg.parked) self->state.parked.insert(replica_id(r));
  const kv::block_hash root = kv::root_hash(self->state.cfg.model_key);
  // A replica that goes down is never chosen again until it registers anew.
  self->set_down_handler([=](const caf::down_msg& dm) {
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
  });
  self->send(self, poll_atom::value);
  return {
      [=](route_atom, const route_query& q) -> route_reply {
        auto& st = self->state;
        const auto t0 = std::chrono::steady_clock::now();
        struct timer {  // records the decision's time however the handler returns
          router_state& st;
          std::chrono::steady_clock::time_point t0;
          ~timer() {
            if (st.decision_ns.size() >= 100000) st.decision_ns.erase(st.decision_ns.begin(), st.decision_ns.begin() + 50000);
            st.decision_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
          }
        } timing{st, t0};
        // A request leaving a replica must not be sent back to it, and a role limits where a
        // request may go; copy the loads only then.
        auto role_of = [&](replica_id replica) {
          auto it = st.cfg.roles.find(replica);
          return it == st.cfg.roles.end() ? topology::pool_role::both : it->second;
        };
        const bool avoiding = std::any_of(st.loads.begin(), st.loads.end(), [&](const routing::replica_load& l) {
          return l.alive && l.replica == q.avoid;
        });
        std::vector<kv::block_hash> hashes;
        if (st.kv_aware || !st.stores.empty()) {  // where this request's prefix is cached, as far as the index knows
          kv::extend_block_hashes(hashes, q.tokens, st.cfg.block_size, {root, kv::salt_key(q.cache_salt), q.public_prefix});
          if (!hashes.empty() && int(hashes.size()) * st.cfg.block_size >= int(q.tokens.size()))
            hashes.pop_back();  // the last token is always computed: a full last block is never a hit
        }
        // Disaggregate: a live prefill replica takes the prompt if its queue is short enough next
        // to what a decode replica would have to compute of it (runtime/routing/disaggregation.h).
        bool prefill = false;
        if (!q.decode && !st.cfg.roles.empty()) {
          int queue = -1, cached = 0;
          for (const auto& l : st.loads) {
            if (!l.alive || l.replica == q.avoid || held_back(st, l.replica)) continue;
            if (role_of(l.replica) == topology::pool_role::prefill)
              queue = queue < 0 ? l.waiting_prompt_tokens : std::min(queue, l.waiting_prompt_tokens);
            else if (st.kv_aware)
              cached = std::max(cached, st.index.matched_blocks(l.replica, hashes) * st.cfg.block_size);
          }
          prefill = queue >= 0 && routing::prefill_remotely(q.prompt_tokens - cached, queue, st.cfg.disaggregation);
        }
        const bool filtering = avoiding || !st.cfg.roles.empty() || st.kv_aware || !st.draining.empty() || !st.parked.empty() ||
                               !st.reported_draining.empty();
        std::vector<routing::replica_load> view;
        if (filtering) {
          view = st.loads;
          for (auto& l : view) {
            const auto role = role_of(l.replica);
            const bool fits = prefill ? role == topology::pool_role::prefill : role != topology::pool_role::prefill;
            if (l.replica == q.avoid || !fits || held_back(st, l.replica)) l.alive = false;
            if (st.kv_aware) {
              l.cached_blocks = st.index.matched_blocks(l.replica, hashes);
              l.index_complete = st.index.complete(l.replica);
            }
          }
        }
        routing::decision d = st.policy({0, q.prompt_tokens, q.priority, st.cfg.block_size}, filtering ? view : st.loads,
                                        st.cfg.params, st.decisions++);
        if (!d.reason.empty() && st.reasons.size() < 64) ++st.reasons[d.reason];
        route_reply r;
        r.prefill_only = prefill;
        r.why = d.why;
        if (!d.index) return r;
        const std::size_t i = *d.index;
        r.placed = true;
        r.replica = st.loads[i].replica;
        r.scheduler = st.replicas[i];
        // Count the placement now, so a burst between two load reports spreads out.
        st.loads[i].running_seqs += 1;
        const int cached = filtering ? std::min(view[i].cached_blocks * st.cfg.block_size, q.prompt_tokens) : 0;
        st.loads[i].waiting_prompt_tokens += q.prompt_tokens - cached;
        // And expect its blocks there: the next request with this prefix should follow it
        // before the replica's events say so.
        if (st.kv_aware) st.index.predict(r.replica, hashes);
        // A store that holds more of the prefix than the replica, in its dtype: the replica pulls
        // it from there.
        if (!q.decode && !st.stores.empty()) {
          const int own = filtering && st.kv_aware ? view[i].cached_blocks : 0;
          int best = own;
          for (const auto& [id, store] : st.stores) {
            const int m = st.index.matched_blocks(id, hashes);
            if (m > best && st.index.same_kv_type(id, r.replica)) {
              best = m;
              r.store = store;
            }
          }
          if (r.store) r.store_hashes.assign(hashes.begin(), hashes.begin() + best);
        }
        return r;
      },
      [=](replica_atom, replica_id replica, scheduler_actor s) {
        const std::size_t i = slot_of(self, replica);
        self->monitor(s);
        self->state.replicas[i] = s;
        self->state.loads[i] = {replica, true, 0, 0, 0, 0};
        self->state.index.drop(replica);  // an earlier life's blocks are not this one's
        self->state.draining.erase(replica);
        self->state.reported_draining.erase(replica);
        self->state.stopped.erase(replica);
        ++self->state.registrations[replica];
        log::info("replica_registered", {{"replica", name_of(self->state.cfg, replica)}, {"generation", self->state.registrations[replica]}});
        if (self->state.events)
          self->send(self->state.events, event_atom::value, std::string("replica_up"), "{\"replica\": " + std::to_string(replica.value) + "}");
        // Answered once the router holds what the replica already computed, so a route sent
        // after the answer sees it.
        auto answered = self->make_response_promise<bool>();
        subscribe_kv(self, replica, s, [answered]() mutable { answered.deliver(true); });
        return answered;
      },
      [=](progress_atom, replica_id replica, std::int32_t prompt_tokens, bool finished) {
        for (auto& l : self->state.loads)
          if (l.replica == replica && l.alive) {
            l.waiting_prompt_tokens = std::max(0, l.waiting_prompt_tokens - prompt_tokens);
            if (finished) l.running_seqs = std::max(0, l.running_seqs - 1);
          }
      },
      [=](kv::kv_event_batch& b) {
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
      },
      [=](router_stats_atom) {
        auto& st = self->state;
        router_stats s = st.stats;
        for (auto& [reason, n] : st.reasons) s.decisions.emplace_back(reason, n);
        s.stores = st.stores.size();
        for (auto& [id, store] : st.stores) s.store_blocks += st.index.size(id);
        if (st.cfg.publisher) {
          s.events_published = st.cfg.publisher->events_published();
          s.events_dropped = st.cfg.publisher->events_dropped();
        }
        return s;
      },
      [=](timing_atom) { return self->state.decision_ns; },
      [=](replicas_atom) {
        std::vector<scheduler_actor> live;
        for (std::size_t i = 0; i < self->state.replicas.size(); ++i)
          if (self->state.loads[i].alive && self->state.replicas[i]) live.push_back(self->state.replicas[i]);
        return live;
      },
      [=](live_atom) {
        std::uint32_t n = 0;
        for (auto& l : self->state.loads) n += l.alive && !held_back(self->state, l.replica) ? 1 : 0;
        return n;
      },
      [=](drain_atom, replica_id replica) {
        self->state.draining.insert(replica);
        self->state.told_at[replica] = std::chrono::steady_clock::now();
      },
      [=](resume_atom, replica_id replica) {
        self->state.draining.erase(replica);
        self->state.reported_draining.erase(replica);
        self->state.told_at[replica] = std::chrono::steady_clock::now();
        if (self->state.parked.erase(replica)) log::info("replica_unparked", {{"replica", name_of(self->state.cfg, replica)}});
      },
      [=](park_atom, replica_id replica) {
        self->state.draining.erase(replica);
        self->state.told_at[replica] = std::chrono::steady_clock::now();
        if (self->state.parked.insert(replica).second) log::info("replica_parked", {{"replica", name_of(self->state.cfg, replica)}});
      },
      [=](watch_atom, admin_event_sink sink) { self->state.events = std::move(sink); },
      [=](policy_atom, const std::string& name, const std::vector<std::pair<std::string, double>>& params) -> caf::result<bool> {
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
        auto& st = self->state;
        st.policy = reg.get(name);
        st.cfg.policy = name;
        st.cfg.params = std::move(p);
        st.kv_aware = name == "kv_aware";
        log::info("routing_policy", {{"policy", name}, {"params", nlohmann::json(st.cfg.params)}});
        return true;
      },
      [=](retire_atom, replica_id replica) {
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
      },
      [=](view_atom) {
        auto& st = self->state;
        std::vector<replica_view> out;
        for (std::size_t i = 0; i < st.replicas.size(); ++i) {
          const replica_id r = st.loads[i].replica;
          if (!st.registrations.count(r)) continue;  // a slot never filled
          out.push_back({r, st.replicas[i], st.loads[i].alive && st.replicas[i], st.draining.count(r) + st.reported_draining.count(r) > 0,
                         st.registrations[r],
                         st.parked.count(r) > 0, st.stopped.count(r) > 0});
        }
        return out;
      },
      [=](store_atom, replica_id id, kv_store_actor store) {
        self->monitor(store);
        self->state.stores[id] = store;
        self->state.index.drop(id);
        subscribe_kv(self, id, store);
      },
      [=](poll_atom) {
        auto& st = self->state;
        for (std::size_t i = 0; i < st.replicas.size(); ++i) {
          if (!st.replicas[i]) continue;
          const replica_id replica = st.loads[i].replica;
          self->request(st.replicas[i], st.cfg.request_timeout, load_atom::value)
              .then([=](const load_report& r) {
                auto& st = self->state;
                // Only a report that differs from what this router holds is weighed (at 20 Hz per replica).
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
                for (auto& l : self->state.loads)
                  if (l.replica == replica && l.alive) {
                    l.running_seqs = r.running_seqs;
                    l.waiting_prompt_tokens = r.waiting_prompt_tokens;
                    l.free_blocks = r.total_blocks - r.used_blocks;
                    l.total_blocks = r.total_blocks;
                  }
              },
              [](caf::error&) {});  // a dead replica is handled by its down message
        }
        self->delayed_send(self, st.cfg.poll_interval, poll_atom::value);
      },
  };
}

}  // namespace troupe::actors
