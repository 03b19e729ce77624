#include "actors/serving/request_owner.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/common/log.h"

namespace troupe::actors {

namespace {

using owner_ptr = owner_actor::stateful_pointer<owner_state>;

using promise = caf::typed_response_promise<bool>;

// An event for the admin console's `watch`, if one is watching. Built only then: a placement
// comes with every request.
template <class Make>
void tell_admin(owner_ptr self, Make make) {
  if (self->state.events) self->send(self->state.events, event_atom::value, make());
}


std::string replica_name(owner_ptr self, std::uint32_t id) { return topology::name_of(self->state.cfg.names, id); }

// The line every request ends with: who, where, how much, how long, how it ended.
void log_end(owner_ptr self, const owned_request& r, const std::string& outcome, const token_update* u, const std::string& error) {
  if (!log::enabled(error.empty() ? log::level::info : log::level::warn)) return;  // every request ends here: build nothing unread
  nlohmann::json places = nlohmann::json::array();
  for (auto id : r.replicas) places.push_back(replica_name(self, id));
  log::fields f = {{"id", r.request.id},
                   {"trace", r.request.trace_id},
                   {"tenant", r.request.cache_salt.empty() ? "default" : r.request.cache_salt},
                   {"replicas", places},
                   {"prompt_tokens", r.request.prompt.size()},
                   {"output_tokens", r.tokens.size()},
                   {"migrations", r.migrations},
                   {"outcome", outcome},
                   {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - r.submitted).count()}};
  if (u) {
    f.emplace_back("queue_s", u->queue_seconds);
    f.emplace_back("prefill_s", u->prefill_seconds);
    f.emplace_back("decode_s", u->decode_seconds);
    if (u->transfer_seconds > 0) f.emplace_back("transfer_s", u->transfer_seconds);
    if (u->draft_tokens > 0) {  // speculative decoding, on the replica that finished it
      f.emplace_back("draft_tokens", u->draft_tokens);
      f.emplace_back("accepted_tokens", u->accepted_tokens);
    }
  }
  if (!error.empty()) f.emplace_back("error", error);
  log::write(error.empty() ? log::level::info : log::level::warn, "request_end", f);
}

// A request counted in its pool's admission queue leaves it (it started, or ended before).
void unqueue(owner_ptr self, owned_request& r, bool started) {
  if (r.queued_in.empty()) return;
  auto& q = self->state.queues[r.queued_in];
  if (started)
    q.started(admission::clock::now());
  else
    q.left();
  r.queued_in.clear();
}

// A request that ran in a pool stops running there: it ended, or was handed off (`freed`: its
// slot is free again), or its replica died (not freed: the slot went with it).
void stop_running(owner_ptr self, owned_request& r, bool freed) {
  if (r.running_in.empty()) return;
  auto& q = self->state.queues[r.running_in];
  if (freed)
    q.finished(admission::clock::now());
  else
    q.lost();
  r.running_in.clear();
}

// The first token of a placement: from now on the request runs in its replica's pool, which a
// new request enters from that pool's admission queue.
void note_started(owner_ptr self, owned_request& r) {
  auto& st = self->state;
  if (!r.queued_in.empty()) {
    auto& q = st.queues[r.queued_in];
    const auto now = admission::clock::now();
    q.started(now);
    if (r.migrations == 0) q.first_token(r.predicted_wait, std::chrono::duration<double>(now - r.submitted).count());
    r.running_in = std::move(r.queued_in);
    r.queued_in.clear();
    return;
  }
  const auto pool = st.cfg.pools.find(r.replica.value);
  if (pool == st.cfg.pools.end() || !r.running_in.empty()) return;
  st.queues[pool->second].joined();
  r.running_in = pool->second;
}

// Ends a request that can no longer be served. Before its first acceptance the client's submit
// gets the error (`code`, `why`); afterwards the client gets a final update whose reason says why.
void fail(owner_ptr self, const std::string& id, const std::string& why, promise* initial,
          serve_errc code = serve_errc::invalid, double retry_after_s = 0) {
  auto it = self->state.requests.find(id);
  if (it == self->state.requests.end()) return;
  if (auto holder = it->second.kv.drop())  // nobody will pull it
    self->send(caf::actor_cast<scheduler_actor>(*holder), release_atom::value, id);
  unqueue(self, it->second, false);
  stop_running(self, it->second, true);
  if (!initial && it->second.replica != no_replica)  // it failed where it ran
    self->state.figures.record(it->second.replica.value, admission::figure_book::kind::failed, owner_clock_s());
  log_end(self, it->second, initial ? "refused" : "error", nullptr, why);
  if (initial) {
    initial->deliver(make_serve_error(code, why, retry_after_s));
  } else {
    token_update u;
    u.id = id;
    u.finished = true;
    u.reason = engine::finish_reason::error;
    u.error = why;
    u.prompt_tokens = std::int32_t(it->second.request.prompt.size());
    u.output_tokens = std::int32_t(it->second.tokens.size());
    self->send(it->second.client, token_batch{0, {u}});
  }
  self->state.requests.erase(it);
}

// One monitor per scheduler, however many requests it serves: each monitor is one down message.
void watch(owner_ptr self, const scheduler_actor& s) {
  if (self->state.watched.insert(s.address()).second) self->monitor(s);
}

void migrate(owner_ptr self, const std::string& id);

// Submits `req` to the replica the router chose; with a holder, the replica pulls req.kv_from
// from it and then releases it.
void submit(owner_ptr self, const std::string& id, const route_reply& rep, const engine::request& req, caf::actor holder,
            std::shared_ptr<promise> initial) {
  const auto sink = caf::actor_cast<token_sink>(self);
  const auto timeout = self->state.cfg.request_timeout;
  if (auto it = self->state.requests.find(id); it != self->state.requests.end()) it->second.sent = ++self->state.sends;
  auto submitted = holder ? self->request(rep.scheduler, timeout, handoff_atom::value, req, holder, sink)
                          : self->request(rep.scheduler, timeout, submit_atom::value, req, sink);
  std::move(submitted).then(
      [=](bool) {
        if (initial) initial->deliver(true);
        tell_admin(self, [&] { return admin::placement_event{id, rep.replica, rep.why, bool(holder)}; });
        // Aborted while it was being placed, or moved on since (this answer came late): the
        // replica must not run it for nobody.
        auto it = self->state.requests.find(id);
        if (it == self->state.requests.end() || it->second.scheduler != rep.scheduler) self->send(rep.scheduler, abort_atom::value, id);
      },
      [=](caf::error& err) {
        if (holder) self->send(caf::actor_cast<scheduler_actor>(holder), release_atom::value, id);
        auto it = self->state.requests.find(id);
        const bool still_there = it != self->state.requests.end() && it->second.scheduler == rep.scheduler;
        const bool system = err.category() == caf::atom("system");
        // The replica died between the router's choice and the submission, or never answered
        // (a stalled or cut-off host): the request is not bad, it moves as a request lost with
        // its replica does, once (if the down message came first, it has moved already). An
        // answer about a placement the request has left since is stale: it lives elsewhere.
        if (!still_there || (system && (err.code() == static_cast<std::uint8_t>(caf::sec::request_receiver_down) ||
                                        err.code() == static_cast<std::uint8_t>(caf::sec::request_timeout)))) {
          if (initial) initial->deliver(true);
          if (still_there) migrate(self, id);
          return;
        }
        // A bad request is refused everywhere: do not move it around.
        fail(self, id, self->system().render(err), initial.get());
      });
}

void place(owner_ptr self, const std::string& id, replica_id avoid, std::shared_ptr<promise> initial);

// Admission sent request `id` to model `to`, its model's fallback: the client hears it before
// any token (the answer names that model), and the request is placed again, there.
void fall_back(owner_ptr self, const std::string& id, owned_request& r, const std::string& to, const std::string& pool,
               const std::string& why) {
  log::info("model_fallback", {{"id", id}, {"trace", r.request.trace_id}, {"from", r.request.model}, {"to", to}, {"pool", pool},
                               {"reason", why}});
  ++self->state.fallbacks;
  r.request.model = to;
  r.fell_back = true;
  token_update u;
  u.id = id;
  u.served_by = to;
  self->send(r.client, token_batch{0, {u}});
}

enum class admitted_as { admitted, refused, rerouted };

int slots_of(const owner_config& cfg, const std::string& pool) {
  const auto it = cfg.pool_slots.find(pool);
  return it == cfg.pool_slots.end() ? 0 : it->second;
}

// A new request in the admission queue of the pool the router chose: admitted (counted there),
// sent to its model's fallback (placed again), or refused now with the wait the queue predicts.
admitted_as admit_new(owner_ptr self, const std::string& id, owned_request& r, const route_reply& rep, replica_id avoid,
                      const std::shared_ptr<promise>& initial) {
  auto& st = self->state;
  const auto pool = st.cfg.pools.find(rep.replica.value);
  const std::string name = pool == st.cfg.pools.end() ? std::string() : pool->second;
  auto& q = st.queues[name];
  const admission::verdict v = q.admit(st.cfg.admission, r.request.priority, admission::clock::now());
  if (auto rule = st.cfg.fallbacks.find(r.request.model); rule != st.cfg.fallbacks.end()) {
    const auto p = admission::predict_first_token(q, slots_of(st.cfg, name), admission::clock::now());
    r.predicted_wait = p.wait;
    const auto d = admission::decide_fallback(rule->second, r.request.allow_fallback && !r.fell_back, r.request.priority, v, p.ttft());
    if (d.fall_back) {
      fall_back(self, id, r, rule->second.to, name, d.reason);
      place(self, id, avoid, initial);
      return admitted_as::rerouted;
    }
  }
  if (!v.admitted) {
    ++st.refused;
    st.figures.record(rep.replica.value, admission::figure_book::kind::refused, owner_clock_s());
    log::info("admission_refused", {{"id", id}, {"trace", r.request.trace_id}, {"pool", name}, {"priority", r.request.priority},
                                    {"reason", v.reason}, {"retry_after_s", v.retry_after_s}});
    tell_admin(self, [&] { return admin::admission_event{id, name, false, r.request.priority, v.reason, double(v.retry_after_s)}; });
    fail(self, id, admission::overload_message(v), initial.get(), serve_errc::overloaded, v.retry_after_s);
    return admitted_as::refused;
  }
  ++st.admitted;
  q.accepted();
  r.queued_in = name;
  return admitted_as::admitted;
}

// No replica can take request `id` now. A new one is refused at once (503 with Retry-After: the
// client may go elsewhere); one that is moving (its replica died, or it was handed off) has a
// client waiting on its stream, so it is placed again every 250 ms until a replica takes it
// (one restarting, a node rejoining, a drain undone) or the request timeout has passed since it
// lost its place; then it ends with an error.
void unplaced(owner_ptr self, const std::string& id, const std::shared_ptr<promise>& initial, const std::string& why) {
  auto it = self->state.requests.find(id);
  if (it == self->state.requests.end()) return;
  owned_request& r = it->second;
  const auto now = std::chrono::steady_clock::now();
  if (!initial && !r.seeking) {
    log::warn("request_waits_for_a_replica", {{"id", id}, {"trace", r.request.trace_id}, {"why", why}});
    r.seeking = true;
    r.seeking_since = now;
  }
  if (initial || now - r.seeking_since > self->state.cfg.request_timeout)
    return fail(self, id, "no replica can take it (" + why + ")", initial.get(), serve_errc::unavailable);
  // The replica it left may come back (restarted, rejoined): a new life, no longer avoided.
  self->delayed_send(self, std::chrono::milliseconds(250), place_atom::value, id, no_replica);
}

// Routes the request and submits it with the tokens streamed so far. `initial` is set for the
// client's own submission; migrations pass null.
void place(owner_ptr self, const std::string& id, replica_id avoid, std::shared_ptr<promise> initial) {
  auto& st = self->state;
  auto it = st.requests.find(id);
  if (it == st.requests.end()) return;
  const owned_request& r = it->second;
  route_query q{id, std::int32_t(r.request.prompt.size() + r.tokens.size()), r.request.priority, avoid, r.prefilled};
  q.tokens = r.request.prompt;
  q.tokens.insert(q.tokens.end(), r.tokens.begin(), r.tokens.end());
  q.cache_salt = r.request.cache_salt;
  q.public_prefix = r.request.public_prefix;
  q.adapter = r.request.adapter;
  q.model = r.request.model;
  q.user = r.request.user.empty() ? id : r.request.user;
  q.split_side = r.request.split_side;
  self->request(st.router, st.cfg.request_timeout, route_atom::value, q)
      .then(
          [=](const route_reply& rep) {
            auto it = self->state.requests.find(id);
            if (it == self->state.requests.end()) return;  // aborted meanwhile
            if (!rep.placed) return unplaced(self, id, initial, rep.why);
            owned_request& r = it->second;
            r.seeking = false;
            auto& st = self->state;
            if (initial && (st.cfg.admission.max_queued > 0 || !st.cfg.fallbacks.empty()))  // a new request
              if (admit_new(self, id, r, rep, avoid, initial) != admitted_as::admitted) return;
            engine::request req = r.request;
            req.generated = r.tokens;
            req.text_returned = r.text_tokens;
            req.prefill_only = rep.prefill_only;
            // The KV once: the receiver releases the holder after its pull; a later move recomputes.
            auto [kv, held_by] = r.kv.take();
            req.kv_from = std::move(kv);
            const caf::actor holder = held_by ? *held_by : caf::actor{};
            r.scheduler = rep.scheduler;
            r.sent = 0;  // until submit() sends it there
            r.replica = rep.replica;
            if (r.replicas.size() < 64) r.replicas.push_back(rep.replica.value);  // bounded: a request moves a few times at most
            r.prompt_done = false;
            watch(self, rep.scheduler);
            if (holder || !rep.store) return submit(self, id, rep, req, holder, initial);
            // A KV store holds more of its prefix than that replica: the store pins what it
            // still has and the replica pulls it from there (no answer: computed as usual).
            self->request(rep.store, self->state.cfg.request_timeout, lookup_atom::value, id, rep.store_hashes)
                .then(
                    [=](kv::transfer::kv_handle& h) mutable {
                      if (h.empty()) return submit(self, id, rep, req, nullptr, initial);
                      req.kv_from = std::move(h);
                      submit(self, id, rep, req, caf::actor_cast<caf::actor>(rep.store), initial);
                    },
                    [=](caf::error&) { submit(self, id, rep, req, nullptr, initial); });
          },
          [=](caf::error& err) {  // the router did not answer in time, or is gone
            fail(self, id, "router: " + self->system().render(err), initial.get(), serve_errc::unavailable);
          });
}

void migrate(owner_ptr self, const std::string& id) {
  auto it = self->state.requests.find(id);
  if (it == self->state.requests.end()) return;
  owned_request& r = it->second;
  if (r.aborted) return fail(self, id, "aborted", nullptr);  // its client left: it ends, it does not move
  if (r.migrations >= self->state.cfg.migration_limit)
    return fail(self, id, "its replica died and it already moved " + std::to_string(r.migrations) + " times", nullptr);
  ++r.migrations;
  r.awaiting_first_token = true;
  r.lost_at = std::chrono::steady_clock::now();
  r.lost_replica = r.replica;
  const replica_id from = r.replica;
  r.scheduler = nullptr;
  stop_running(self, r, false);
  place(self, id, from, nullptr);
}

}  // namespace

namespace {

// The replica holding requests went down: each moves to another (recomputed, or pulled from
// a KV holder still alive).
void on_replica_down(owner_ptr self, const caf::down_msg& dm) {
  // A replica that comes back (its node rejoined after a cut link) has the same address and
  // must be monitored anew: kept here, its next death went unnoticed and its requests ran
  // for nobody, their clients waiting forever.
  self->state.watched.erase(dm.source);
  std::vector<std::string> lost;
  std::string replica;
  for (auto& [id, r] : self->state.requests)
    if (r.scheduler && r.scheduler.address() == dm.source) {
      lost.push_back(id);
      replica = replica_name(self, r.replica.value);
    }
  if (!lost.empty())
    log::warn("replica_lost", {{"replica", replica}, {"requests_moving", lost.size()}, {"reason", caf::to_string(dm.reason)}});
  for (auto& id : lost) migrate(self, id);
}

// A client's request, placed on a replica; answered once a replica accepted it (or with why none could).
caf::result<bool> submit(owner_ptr self, const engine::request& req, token_sink client) {
    auto& st = self->state;
    if (st.requests.count(req.id)) return caf::make_error(caf::sec::invalid_argument, "request id '" + req.id + "' is in use");
    owned_request r;
    r.request = req;
    r.client = std::move(client);
    st.requests.emplace(req.id, std::move(r));
    auto rp = std::make_shared<promise>(self->make_response_promise<bool>());
    place(self, req.id, no_replica, rp);
    return *rp;
}

void abort_request(owner_ptr self, const std::string& id) {
    auto it = self->state.requests.find(id);
    if (it == self->state.requests.end()) return;
    it->second.aborted = true;
    if (it->second.scheduler) {
      self->send(it->second.scheduler, abort_atom::value, id);  // its final update follows
    } else {
      fail(self, id, "aborted while being placed", nullptr);
    }
}

// A moved request's first token from its new replica: the migration is recorded (for the
// console's `migrations` and `watch`) with the time it took.
void note_migration(owner_ptr self, const std::string& id, owned_request& r) {
  auto& st = self->state;
  r.awaiting_first_token = false;
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - r.lost_at).count();
  st.migrations.push({id, r.lost_replica, r.replica, secs,
                           std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count()});
  tell_admin(self, [&] { return admin::migration_event{id, r.lost_replica, r.replica, secs}; });
  log::info("request_migrated", {{"id", id}, {"trace", r.request.trace_id}, {"from", replica_name(self, r.lost_replica.value)},
                                 {"to", replica_name(self, r.replica.value)}, {"seconds_to_first_token", secs}});
}

// Prefilled (or drained) elsewhere: the client's stream goes on from a decode-capable replica,
// which pulls the KV from the one that computed it instead of recomputing it. A request handed
// off before anything was computed just goes elsewhere.
void hand_off(owner_ptr self, const std::string& id, owned_request& r, token_update& u, std::map<token_sink, token_batch>& out,
              std::uint64_t step) {
  const replica_id from = r.replica;
  if (!u.kv.empty()) {
    r.kv.grant(std::move(u.kv), caf::actor_cast<caf::actor>(r.scheduler), from);
    r.prefilled = true;
  }
  u.kv = {};
  u.finished = false;
  u.reason = engine::finish_reason::none;
  r.scheduler = nullptr;  // that replica is done with it
  stop_running(self, r, true);
  if (!u.tokens.empty()) {  // a prefill's first token; a drained request has none new
    auto& batch = out[r.client];
    batch.step = step;
    batch.updates.push_back(std::move(u));
  }
  place(self, id, from, nullptr);
}

// One update from the replica `from`: to the client's batch in `out`, or (a handoff, a failed
// transfer) the request placed again.
void on_update(owner_ptr self, const caf::actor_addr& from, token_update& u, std::map<token_sink, token_batch>& out,
               std::uint64_t step) {
  auto& st = self->state;
  auto it = st.requests.find(u.id);
  // Only the replica now serving a request may extend it: a replica that was given up
  // for dead (a cut link) must not add tokens twice.
  if (it == st.requests.end() || !it->second.scheduler || it->second.scheduler.address() != from) return;
  owned_request& r = it->second;
  if (r.awaiting_first_token && !u.tokens.empty()) note_migration(self, u.id, r);
  // The router's view of this replica's load, current before its next load report.
  const bool first = !r.prompt_done && !u.tokens.empty();
  if (first || u.finished)
    self->send(st.router, progress_atom::value, r.replica,
               std::int32_t(first ? r.request.prompt.size() + r.tokens.size() : 0), bool(u.finished));
  r.prompt_done |= first;
  if (first) note_started(self, r);
  if (first && r.migrations == 0 && r.replicas.size() == 1) {  // a new request's own first token
    r.first_token_at = std::chrono::steady_clock::now();
    const auto pool = st.cfg.pools.find(r.replica.value);
    const double ttft = std::chrono::duration<double>(r.first_token_at - r.submitted).count();
    if (pool != st.cfg.pools.end()) st.latencies.first_token(pool->second, ttft, r.first_token_at);
    st.figures.record(r.replica.value, admission::figure_book::kind::ttft, owner_clock_s(), ttft);
  }
  r.tokens.insert(r.tokens.end(), u.tokens.begin(), u.tokens.end());
  if (!u.tokens.empty()) r.text_tokens = u.text_tokens;
  u.migrations = r.migrations;
  if (u.finished && u.reason == engine::finish_reason::transfer_failed) {
    // Its KV could not be pulled and the policy is to prefill it again elsewhere.
    r.prefilled = false;
    r.scheduler = nullptr;
    stop_running(self, r, true);
    place(self, it->first, r.kv.from(), nullptr);
    return;
  }
  if (u.finished && u.reason == engine::finish_reason::handoff) return hand_off(self, it->first, r, u, out, step);
  auto& batch = out[r.client];
  batch.step = step;
  const bool finished = u.finished;
  batch.updates.push_back(std::move(u));
  if (finished) {
    const std::size_t n = r.tokens.size();
    if (r.migrations == 0 && n >= 2 && r.first_token_at != std::chrono::steady_clock::time_point{}) {
      const auto pool = st.cfg.pools.find(r.replica.value);
      const auto now = std::chrono::steady_clock::now();
      const double itl = std::chrono::duration<double>(now - r.first_token_at).count() / double(n - 1);
      if (pool != st.cfg.pools.end()) st.latencies.between_tokens(pool->second, itl, now);
      st.figures.record(r.replica.value, admission::figure_book::kind::itl, owner_clock_s(), itl);
    }
    const bool bad = batch.updates.back().reason == engine::finish_reason::error;
    st.figures.record(r.replica.value, bad ? admission::figure_book::kind::failed : admission::figure_book::kind::finished, owner_clock_s());
    unqueue(self, r, false);
    stop_running(self, r, true);
    log_end(self, r, engine::finish_reason_name(batch.updates.back().reason), &batch.updates.back(), batch.updates.back().error);
    st.requests.erase(it);
  }
}

// A replica's step of updates, regrouped by client.
void on_tokens(owner_ptr self, token_batch& b) {
  const caf::actor_addr from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  std::map<token_sink, token_batch> out;
  for (auto& u : b.updates) on_update(self, from, u, out, b.step);
  for (auto& [client, batch] : out) self->send(client, std::move(batch));
}

// The oldest `limit` requests in flight, for the console's `requests`.
std::vector<request_view> requests_view(owner_ptr self, std::uint32_t limit) {
    std::vector<request_view> out;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, r] : self->state.requests) {
      request_view v;
      v.id = id;
      v.replica = r.scheduler ? r.replica : no_replica;
      v.prompt_tokens = std::int32_t(r.request.prompt.size());
      v.output_tokens = std::int32_t(r.tokens.size());
      v.migrations = r.migrations;
      v.priority = r.request.priority;
      v.age_seconds = std::chrono::duration<double>(now - r.submitted).count();
      out.push_back(std::move(v));
    }
    std::sort(out.begin(), out.end(), [](const request_view& a, const request_view& b) { return a.age_seconds > b.age_seconds; });
    if (out.size() > limit) out.resize(limit);
    return out;
}

// A request the book holds on a replica that no longer has it (or is no longer live): moved
// as a request lost with its replica is, or ended if its client had given up on it.
void recover(owner_ptr self, const std::string& id, const std::string& why) {
  auto it = self->state.requests.find(id);
  if (it == self->state.requests.end()) return;
  log::warn("request_unaccounted", {{"id", id}, {"trace", it->second.request.trace_id},
                                    {"replica", replica_name(self, it->second.replica.value)}, {"reason", why}});
  migrate(self, id);
}

// A live replica's answer to which of this owner's requests it holds (asked once every
// submission numbered `asked` or before had reached it): the book's requests there that it
// lacks are recovered, and the ones it runs that the book places elsewhere (or ended) are
// aborted there.
void settle(owner_ptr self, const scheduler_actor& s, const std::vector<std::string>& held, std::uint64_t asked) {
  auto& st = self->state;
  const std::set<std::string> there(held.begin(), held.end());
  std::vector<std::string> lost;
  for (const auto& [id, r] : st.requests)
    if (r.scheduler == s && r.sent > 0 && r.sent <= asked && !there.count(id)) lost.push_back(id);
  for (const auto& id : lost) recover(self, id, "its replica does not hold it");
  for (const auto& id : held) {
    auto it = st.requests.find(id);
    if (it != st.requests.end() && it->second.scheduler == s) continue;
    log::info("stale_request_aborted", {{"id", id}, {"reason", it == st.requests.end() ? "it ended" : "it runs elsewhere"}});
    self->send(s, abort_atom::value, id);
  }
}

// The book against the replicas: requests on a replica the router no longer counts live are
// recovered; each live replica says which of ours it holds (settle).
void reconcile(owner_ptr self, const std::vector<scheduler_actor>& live) {
  auto& st = self->state;
  std::set<caf::actor_addr> alive;
  for (const auto& s : live) alive.insert(s.address());
  std::vector<std::string> lost;
  for (const auto& [id, r] : st.requests)
    if (r.scheduler && r.sent > 0 && !alive.count(r.scheduler.address())) lost.push_back(id);
  for (const auto& id : lost) recover(self, id, "its replica is no longer live");
  // Every live replica, also those the book places nothing on: one may run a request of ours
  // that the book has moved elsewhere or ended.
  const auto sink = caf::actor_cast<token_sink>(self);
  const std::uint64_t asked = st.sends;
  for (const auto& s : live)
    self->request(s, st.cfg.request_timeout, held_atom::value, sink)
        .then([=](const std::vector<std::string>& held) { settle(self, s, held, asked); },
              [](caf::error&) {});  // no answer: its down message, or the router's verdict at the next sweep
}

void sweep(owner_ptr self) {
  auto& st = self->state;
  self->delayed_send(self, st.cfg.sweep, sweep_atom::value);
  self->request(st.router, st.cfg.request_timeout, replicas_atom::value)
      .then([=](const std::vector<scheduler_actor>& live) { reconcile(self, live); }, [](caf::error&) {});
}

}  // namespace

owner_actor::behavior_type request_owner(owner_actor::stateful_pointer<owner_state> self, router_actor router,
                                         owner_config cfg) {
  self->state.cfg = cfg;
  self->state.router = std::move(router);
  self->set_down_handler([=](const caf::down_msg& dm) { on_replica_down(self, dm); });
  if (cfg.sweep.count() > 0) self->delayed_send(self, cfg.sweep, sweep_atom::value);
  return {
      [=](submit_atom, const engine::request& req, token_sink client) { return submit(self, req, std::move(client)); },
      [=](abort_atom, const std::string& id) { abort_request(self, id); },
      [=](token_batch& b) { on_tokens(self, b); },
      [=](migrations_atom) { return self->state.migrations.items(); },
      [=](requests_atom, std::uint32_t limit) { return requests_view(self, limit); },
      [=](watch_atom, admin_event_sink sink) { self->state.events = std::move(sink); },
      [=](latency_atom) { return self->state.latencies.at(std::chrono::steady_clock::now()); },
      [=](figures_atom, double since) { return self->state.figures.since(since); },
      [=](sweep_atom) { sweep(self); },
      [=](place_atom, const std::string& id, replica_id avoid) { place(self, id, avoid, nullptr); },
  };
}

}  // namespace troupe::actors
