#include "actors/serving/scheduler_actor.h"

#include <algorithm>

#include "actors/serving/group_executor.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"
#include "runtime/engine/sim_executor.h"
#include "runtime/common/wall_clock.h"

namespace troupe::actors {

namespace {

// A draining replica always gets its next turn: it runs no step but hands off what is left and
// answers its drain, even when nothing is left to compute (the step in flight as the drain came
// finished its last request).
void schedule_step(scheduler_actor::stateful_pointer<scheduler_state> self) {
  if (self->state.step_pending || !(self->state.engine->has_work() || self->state.draining)) return;
  self->state.step_pending = true;
  if (self->state.injected_delay.count() > 0)
    self->delayed_send(self, self->state.injected_delay, step_atom::value);
  else
    self->send(self, step_atom::value);
}

token_update to_update(const engine::request_output& o) {
  token_update u;
  u.id = o.id;
  u.tokens = o.new_tokens;
  u.text = o.text_delta;
  u.finished = o.finished;
  u.reason = o.reason;
  u.prompt_tokens = o.num_prompt_tokens;
  u.cached_tokens = o.cached_tokens;
  u.output_tokens = o.num_output_tokens;
  u.text_tokens = o.text_tokens;
  for (const auto& lp : o.logprobs) {
    u.logprobs.push_back(lp.logprob);
    u.top_ids.push_back(lp.top_ids);
    u.top_logprobs.push_back(lp.top_logprobs);
  }
  u.prompt_logprobs = o.prompt_logprobs;
  u.embedding = o.embedding;
  u.queue_seconds = o.queue_seconds;
  u.prefill_seconds = o.prefill_seconds;
  u.decode_seconds = o.decode_seconds;
  u.transfer_seconds = o.transfer_seconds;
  u.draft_tokens = o.draft_tokens;
  u.accepted_tokens = o.accepted_tokens;
  u.kv = o.kv;
  return u;
}

}  // namespace

namespace {

// Tells the replica holding a pulled request's KV that it may free it.
void release_holder(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& id) {
  if (auto holder = self->state.kv.pulled(id)) self->send(caf::actor_cast<scheduler_actor>(*holder), release_atom::value, id);
}

// One batch per destination for a step's outputs.
void deliver(scheduler_actor::stateful_pointer<scheduler_state> self, std::vector<engine::request_output>& outputs) {
  auto& st = self->state;
  std::map<token_sink, token_batch> batches;
  for (auto& o : outputs) {
    if (o.finished) {
      release_holder(self, o.id);  // ended before its pull did (an abort)
      if (auto t = st.traces.find(o.id); t != st.traces.end()) {
        const bool bad = o.reason == engine::finish_reason::error || o.reason == engine::finish_reason::transfer_failed;
        if (bad || log::current_level() <= log::level::debug)  // the fields are built only for a line that shows
          log::write(bad ? log::level::warn : log::level::debug, "replica_request_end",
                     {{"id", o.id}, {"trace", t->second}, {"outcome", engine::finish_reason_name(o.reason)},
                      {"output_tokens", o.num_output_tokens}});
        st.traces.erase(t);
      }
    }
    auto it = st.sinks.find(o.id);
    if (it == st.sinks.end()) continue;
    auto& b = batches[it->second];
    b.step = st.steps;
    b.updates.push_back(to_update(o));
    if (o.finished) st.sinks.erase(it);
  }
  for (auto& [sink, batch] : batches) self->send(sink, std::move(batch));
}

// Requests handed off to a decode replica (disaggregated prefill) keep their blocks here until
// the receiver has pulled their KV and says so, or until the hold expires; a handoff nobody
// receives (its sink is gone) is freed at once.
void hold_handoffs(scheduler_actor::stateful_pointer<scheduler_state> self, std::vector<engine::request_output>& outputs) {
  auto& st = self->state;
  for (auto& o : outputs) {
    if (!o.finished || o.reason != engine::finish_reason::handoff || o.kv.empty()) continue;
    const auto d = st.kv.handed_off(o.id, st.sinks.count(o.id) > 0);
    if (d.what == d.hold) self->delayed_send(self, st.engine->config().handoff_hold, hold_atom::value, o.id, d.timer);
    if (d.what == d.free_now) st.engine->release_handoff(o.id);
  }
}

// The prefix cache's changes of the step that just ended, to every subscriber. A cache reset
// (the KV was lost) starts a new generation with the all-cleared event.
void publish_kv_events(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  for (auto& b : st.kv_events.batches(st.engine->kv().take_events(), unix_seconds(), st.engine->config().kv_type))
    for (const auto& s : st.kv_events.sinks()) self->send(s, b);
}

// A drained replica answers everyone waiting for it to be empty.
void check_drained(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  if (!st.draining || st.engine->has_unfinished() || st.engine->num_handoffs_held() > 0 || st.kv.num_relayed() > 0) return;
  for (auto& p : st.drained) p.deliver(true);
  st.drained.clear();
}

// The cached blocks the step let go of, to this node's KV store (write-behind: the store copies
// them on its own thread while they stay pinned here, and the next step does not wait for it).
void offload(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  if (!st.store) return;
  engine::offload_batch b = st.engine->take_offloads();
  if (b.blocks.empty()) return;
  const auto blocks = b.from.blocks;
  auto done = [self, blocks] {
    self->state.engine->offload_done(blocks);
    schedule_step(self);
  };
  self->request(st.store, st.engine->config().transfer_timeout, offload_atom::value, std::move(b))
      .then([done](std::uint32_t) { done(); }, [done](caf::error&) { done(); });
}

// One engine step; its outputs go out when the executor is done with it (at once, after the
// cost model's time on the sim backend, or when the worker group answers). A draining replica
// runs no step: it hands off everything it holds instead.
void run_step(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  if (st.draining && !st.engine->step_in_flight()) {
    auto outputs = st.engine->hand_off_all();
    hold_handoffs(self, outputs);
    deliver(self, outputs);
    check_drained(self);
    return;
  }
  if (st.engine->step_in_flight() || !st.engine->has_work()) return;
  st.engine->step([self](std::vector<engine::request_output> outputs) {
    ++self->state.steps;
    // The KV events first: whoever acts on these tokens (a client routing its next request)
    // then finds the router already told where their blocks are.
    publish_kv_events(self);
    hold_handoffs(self, outputs);
    deliver(self, outputs);
    offload(self);
    schedule_step(self);
  });
}

// The head that submitted requests is gone (killed, cut off): nobody reads their tokens, so
// they are aborted and their KV freed; that head's request owner, or another head's, places
// them again if it still can. Returns whether `m` was about a sink.
bool on_sink_down(scheduler_actor::stateful_pointer<scheduler_state> self, const caf::down_msg& m) {
  auto& st = self->state;
  const bool kv_sink = st.kv_events.drop_if([&](const kv_event_sink& s) { return s.address() == m.source; }) > 0;
  if (!st.watched_sinks.erase(m.source)) return kv_sink;
  bool any = false;
  for (auto it = st.sinks.begin(); it != st.sinks.end();) {
    if (it->second.address() == m.source) {
      any |= st.engine->abort(it->first);
      it = st.sinks.erase(it);
    } else {
      ++it;
    }
  }
  if (any) schedule_step(self);
  return true;
}

// Queues a request whose tokens go to `sink`; an error names what was wrong with it.
caf::result<bool> accept(scheduler_actor::stateful_pointer<scheduler_state> self, const engine::request& r, token_sink sink) {
  auto& st = self->state;
  try {
    st.engine->add_request(r);
  } catch (const input_error& err) {
    return caf::make_error(caf::sec::invalid_argument, err.what());
  }
  if (st.watched_sinks.insert(sink.address()).second) self->monitor(sink);
  st.sinks[r.id] = std::move(sink);
  st.traces[r.id] = r.trace_id;
  if (log::current_level() <= log::level::debug)
    log::debug("replica_request_start", {{"id", r.id}, {"trace", r.trace_id}, {"prompt_tokens", r.prompt.size()}});
  schedule_step(self);
  return true;
}

// Reads an adapter's folder here and loads it (the read is the size of the adapter, small beside
// a step); the engine refuses what it cannot run.
caf::result<std::string> load_adapter(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& name,
                                      const std::string& dir) {
  try {
    std::string identity = engine::load_adapter_folder(*self->state.engine, name, dir);
    log::info("lora_loaded", {{"adapter", identity}, {"dir", dir}});
    return identity;
  } catch (const input_error& err) {
    return caf::make_error(caf::sec::invalid_argument, err.what());
  }
}

bool unload_adapter(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& identity) {
  const bool was = self->state.engine->unload_adapter(identity);
  if (was) log::info("lora_unloaded", {{"adapter", identity}});
  return was;
}

// What the replica reports of its load and counters (router, frontend's /metrics, admin console).
load_report report_of(const scheduler_state& st) {
  const auto& e = *st.engine;
  load_report r;
  static_cast<engine::engine_stats&>(r) = e.stats();
  r.running_seqs = std::int32_t(e.num_running());
  r.waiting_seqs = std::int32_t(e.num_waiting());
  r.waiting_prompt_tokens = std::int32_t(e.waiting_prompt_tokens());
  r.used_blocks = e.blocks().num_used();
  r.total_blocks = e.blocks().num_blocks();
  r.steps = st.steps;  // counted where the outputs are delivered
  r.prefix_queries = e.kv().stats().queries;
  r.prefix_hits = e.kv().stats().hits;
  r.cached_blocks = e.kv().num_cached();
  r.handoffs_held = std::int32_t(e.num_handoffs_held() + st.kv.num_relayed());  // held here or relayed
  r.draining = st.draining;
  r.parked = st.parked;
  r.model_key = e.config().model_key;
  return r;
}

namespace {

// A request handed off by another replica: accepted, and the replica holding its KV remembered
caf::result<bool> accept_handoff(scheduler_actor::stateful_pointer<scheduler_state> self, const engine::request& r, caf::actor holder, token_sink sink) {
  if (!r.kv_from.empty() && r.kv_from.layout.model_key != self->state.engine->config().model_key) {
    // KV of another revision of the model (a swap under way) is not reusable here: the holder
    // lets it go, and the request is computed again from its tokens, as after a migration.
    log::info("kv_of_another_revision", {{"id", r.id}, {"trace", r.trace_id}, {"from", r.kv_from.layout.model_key},
                                         {"here", self->state.engine->config().model_key}});
    if (holder) self->send(caf::actor_cast<scheduler_actor>(holder), release_atom::value, r.id);
    engine::request fresh = r;
    fresh.kv_from = {};
    return accept(self, fresh, std::move(sink));
  }
  auto res = accept(self, r, std::move(sink));
  if (holder && self->state.sinks.count(r.id)) self->state.kv.expect(r.id, std::move(holder));
  return res;
}

// The new replica claims a handed-off request's blocks: a fresh hold here, or the holder asked when relayed
caf::result<bool> claim_hold(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& id) {
  auto& st = self->state;
  auto c = st.kv.claimed(id);  // a fresh hold from now; the earlier timer no longer matches
  if (c.timer) self->delayed_send(self, st.engine->config().handoff_hold, hold_atom::value, id, *c.timer);
  if (!c.ask) return c.held;
  auto rp = self->make_response_promise<bool>();  // the holder answers for its blocks
  self->request(caf::actor_cast<scheduler_actor>(*c.ask), st.engine->config().transfer_timeout, claim_atom::value, id)
      .then([rp](bool held) mutable { rp.deliver(held); }, [rp](caf::error&) mutable { rp.deliver(false); });
  return rp;
}

// The new replica has the blocks (or gave up): they are freed here, or at the holder when relayed
void release_hold(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& id) {
  auto& st = self->state;
  const auto r = st.kv.released(id);
  if (r.tell)
    self->send(caf::actor_cast<scheduler_actor>(*r.tell), release_atom::value, id);
  else if (r.free_blocks && st.engine->release_handoff(id))
    schedule_step(self);
  check_drained(self);
}

// A hold ran out: its blocks are freed (a relay's expiry only forgets it; the holder's own hold frees them)
void expire_hold(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& id, std::uint64_t n) {
  auto& st = self->state;
  if (st.kv.expired(id, n) && st.engine->release_handoff(id)) schedule_step(self);
  check_drained(self);
}

// Hands every request off and answers once none is left (false if resumed first)
caf::result<bool> start_drain(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  st.draining = true;
  auto rp = self->make_response_promise<bool>();
  st.drained.push_back(rp);
  // Between steps: hand off now (a step in flight hands off when it ends).
  if (!st.engine->step_in_flight()) run_step(self);
  check_drained(self);
  return rp;
}

// A drain called off: its waiters get false
void resume(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto& st = self->state;
  st.draining = false;
  for (auto& p : st.drained) p.deliver(false);  // that drain will not end
  st.drained.clear();
  schedule_step(self);
}

void set_sources(scheduler_actor::stateful_pointer<scheduler_state> self, std::vector<kv::transfer::kv_source>& sources) {
  if (self->state.set_kv_sources) self->state.set_kv_sources(std::move(sources));
}

void abort_request(scheduler_actor::stateful_pointer<scheduler_state> self, const std::string& id) {
  if (self->state.engine->abort(id)) schedule_step(self);
}

std::vector<std::string> held_for(scheduler_actor::stateful_pointer<scheduler_state> self, const token_sink& sink) {
  std::vector<std::string> ids;
  for (const auto& [id, s] : self->state.sinks)
    if (s.address() == sink.address()) ids.push_back(id);
  return ids;
}

// A router follows this replica's KV events from now on, starting from everything it holds
kv_snapshot subscribe_kv(scheduler_actor::stateful_pointer<scheduler_state> self, replica_id replica, kv_event_sink sink) {
  auto& st = self->state;
  publish_kv_events(self);  // what earlier subscribers have not seen yet, before the snapshot
  if (st.kv_events.subscribe(replica, sink) && st.watched_sinks.insert(sink.address()).second) self->monitor(sink);
  return kv_snapshot{st.kv_events.generation(), st.kv_events.seq(), st.engine->kv().cached_hashes()};
}

caf::result<group_actor> group_of(scheduler_actor::stateful_pointer<scheduler_state> self) {
  if (!self->state.group) return caf::make_error(caf::sec::invalid_argument, "a sim replica has no worker group");
  return self->state.group;
}

void step_now(scheduler_actor::stateful_pointer<scheduler_state> self) {
  self->state.step_pending = false;
  run_step(self);
}

void wake_up(scheduler_actor::stateful_pointer<scheduler_state> self) {
  auto then = std::move(self->state.wake);
  self->state.wake = nullptr;
  if (then) then();
}

}  // namespace

scheduler_actor::behavior_type scheduler_behavior(scheduler_actor::stateful_pointer<scheduler_state> self) {
  self->state.kv_events = kv::event_stream<kv_event_sink>(std::uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count()));
  // A pull that ended frees the sender's blocks at once, and may let a step run.
  self->state.engine->on_transfer([self](const engine::transfer_record& rec) {
    release_holder(self, rec.id);
    schedule_step(self);
  });
  return {
      [=](submit_atom, const engine::request& r, token_sink sink) { return accept(self, r, std::move(sink)); },
      [=](handoff_atom, const engine::request& r, caf::actor holder, token_sink sink) { return accept_handoff(self, r, std::move(holder), std::move(sink)); },
      [=](claim_atom, const std::string& id) { return claim_hold(self, id); },
      [=](release_atom, const std::string& id) { release_hold(self, id); },
      [=](hold_atom, const std::string& id, std::uint64_t n) { expire_hold(self, id, n); },
      [=](drain_atom) { return start_drain(self); },
      [=](park_atom, bool parked) { self->state.parked = parked; },
      [=](slow_atom, std::int32_t ms) { self->state.injected_delay = std::chrono::milliseconds(std::max(0, ms)); },
      [=](resume_atom) { resume(self); },
      [=](kv_sources_atom, std::vector<kv::transfer::kv_source>& sources) { set_sources(self, sources); },
      [=](abort_atom, const std::string& id) { abort_request(self, id); },
      [=](held_atom, const token_sink& sink) { return held_for(self, sink); },
      [=](load_atom) { return report_of(self->state); },
      [=](lora_atom, const std::string& name, const std::string& dir) { return load_adapter(self, name, dir); },
      [=](lora_atom, const std::string& identity) { return unload_adapter(self, identity); },
      [=](kv_subscribe_atom, replica_id replica, kv_event_sink sink) { return subscribe_kv(self, replica, std::move(sink)); },
      [=](group_atom) { return group_of(self); },
      [=](step_atom) { step_now(self); },
      [=](wake_atom) { wake_up(self); },
  };
}

}  // namespace


scheduler_actor::behavior_type scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
                                         std::shared_ptr<const model::llama_model> model,
                                         std::shared_ptr<const tokenizer::tokenizer> tok, engine::engine_config cfg,
                                         group_config group, kv_store_actor store) {
  auto& st = self->state;
  st.store = std::move(store);
  cfg.kv_offload = bool(st.store);
  st.group_cfg = group;
  // The ranks' KV has the geometry of the engine's block pool. Monitors, not links, tie the
  // replica's lifetime to its group both ways: a link would pass an exit_reason::kill on
  // unconditionally, through the scheduler to its node agent and every other replica there.
  st.group = self->spawn<caf::monitored>(group_supervisor, model, engine::kv_geometry(cfg, model->config()), group,
                                         caf::actor_cast<caf::actor>(self));
  const int layers = model->num_layers();
  const int ranks = group_ranks(group, layers);
  auto exec = std::make_unique<group_executor<scheduler_actor::stateful_pointer<scheduler_state>>>(
      self, st.group, group.step_timeout, layers, ranks, std::max(1, group.tensor_ranks));
  auto* raw = exec.get();
  st.set_kv_sources = [raw](std::vector<kv::transfer::kv_source> s) { raw->set_sources(std::move(s)); };
  raw->set_claim([self](const std::string& id, std::function<void(bool)> then) {
    const auto holder = self->state.kv.holder_of(id);
    if (!holder) return then(true);  // nobody holds it for us: KV in-process
    self->request(caf::actor_cast<scheduler_actor>(*holder), self->state.engine->config().transfer_timeout, claim_atom::value, id)
        .then([then](bool held) { then(held); }, [then](caf::error&) { then(false); });
  });
  auto draft = engine::draft_for(cfg, *model, tok.get());
  st.engine = std::make_unique<engine::engine>(model->config(), std::move(tok), cfg, std::move(exec), std::move(draft));
  self->set_down_handler([=](const caf::down_msg& m) {
    if (on_sink_down(self, m)) return;
    if (m.source == self->state.group.address())
      self->quit(caf::make_error(caf::sec::runtime_error, "the replica's worker group ended: " + caf::to_string(m.reason)));
  });
  return scheduler_behavior(self);
}

scheduler_actor::behavior_type sim_scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
                                             model::model_config shape, sim::gpu_spec gpu, engine::engine_config cfg) {
  // The cost model's time for each step passes as a delayed message, so no thread sleeps.
  auto wait = [self, speedup = gpu.speedup](double seconds, std::function<void()> then) {
    self->state.wake = std::move(then);
    const auto d = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(seconds / speedup));
    self->delayed_send(self, d, wake_atom::value);
  };
  auto exec = std::make_unique<engine::sim_executor>(shape, gpu, wait);
  self->state.engine = std::make_unique<engine::engine>(shape, nullptr, cfg, std::move(exec));
  self->set_down_handler([=](const caf::down_msg& m) { on_sink_down(self, m); });
  return scheduler_behavior(self);
}

}  // namespace troupe::actors
