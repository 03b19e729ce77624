#include "actors/worker_group.h"

#include "runtime/collectives/shm.h"
#include "runtime/common/log.h"
#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"

namespace troupe::actors {

void register_worker_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<engine::forward_plan>("troupe.forward_plan");
  cfg.add_message_type<stage_input>("troupe.stage_input");
  cfg.add_message_type<kv_pull>("troupe.kv_pull");
  cfg.add_message_type<kv::transfer::kv_handle>("troupe.kv_handle");
  cfg.add_message_type<std::vector<kv::transfer::kv_source>>("troupe.kv_sources");
  cfg.add_message_type<engine::step_result>("troupe.step_result");
  cfg.add_message_type<stage_output>("troupe.stage_output");
  cfg.add_message_type<sampling::sampling_row>("troupe.sampling_row");
  cfg.add_message_type<sampling::sampled_token>("troupe.sampled_token");
  cfg.add_message_type<group_status>("troupe.group_status");
  cfg.add_message_type<worker_actor>("troupe.worker_actor");
  cfg.add_message_type<std::vector<worker_actor>>("troupe.worker_actors");
}

std::pair<int, int> rank_layers(int layers, int r, int n) { return {layers * r / n, layers * (r + 1) / n}; }

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, std::shared_ptr<kv::kv_cache> cache,
                                   int first, int last, bool last_stage, std::shared_ptr<collectives::fault_injector> tp,
                                   caf::actor supervisor) {
  auto& st = self->state;
  self->monitor(supervisor);  // a rank lives no longer than its group
  self->set_down_handler([=](const caf::down_msg& m) { self->quit(m.reason); });
  st.cache = std::move(cache);
  st.model = std::move(model);
  st.first = first;
  st.last = last;
  st.last_stage = last_stage;
  st.tp = std::move(tp);
  return {
      [=](execute_atom, const stage_input& in) -> caf::result<stage_output> {
        auto& st = self->state;
        const model::forward_batch b = engine::view(in.plan);
        collectives::communicator* tp = st.tp.get();
        const bool lead = !tp || tp->rank() == 0;  // the rank that answers for the stage
        stage_output out;
        try {
          if (st.first == 0)
            st.model->embed(b, st.ws);
          else
            st.ws.x = in.hidden;
          st.model->run_layers(b, st.first, st.last, *st.cache, st.ws, tp);
          auto counts = [&] {  // the stage's routing statistics, answered by its first rank
            if (lead) out.result.expert_tokens = std::move(st.ws.expert_tokens);
            st.ws.expert_tokens.clear();
          };
          if (!st.last_stage) {
            if (lead) out.hidden = st.ws.x;
            counts();
            return out;
          }
          // The last stage chooses the tokens where the logits are; only ids leave it.
          const auto& mc = st.model->config();
          st.logits.resize(in.plan.logit_rows.size() * std::size_t(mc.vocab_size));
          st.model->head(b, st.ws, st.logits.data(), tp);
          counts();
        } catch (const collectives::collective_error& e) {  // the group failed; the supervisor restarts it
          return caf::make_error(caf::sec::runtime_error, e.what());
        } catch (const collectives::rank_fault& e) {  // fault injection: this rank dies here
          self->quit(caf::make_error(caf::sec::runtime_error, e.what()));
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        if (lead) out.result.tokens = sampling::sample_rows(st.logits, in.plan.sampling, st.model->config().vocab_size,
                                                            st.model->config().eos_token_ids);
        return out;
      },
      [=](fault_atom, std::int32_t calls) {
        if (self->state.tp) self->state.tp->arm(calls);
        else self->quit(caf::make_error(caf::sec::runtime_error, "rank killed by fault injection"));  // no collectives to die in
      },
  };
}

namespace {

void withdraw(group_state& st) {
  for (const auto& s : st.sources) kv::transfer::registry::global().withdraw(s.key);
  st.sources.clear();
  st.caches.clear();
}

int stages_of(const group_state& st) { return group_ranks(st.cfg, st.model->num_layers()); }

}  // namespace

group_state::~group_state() { withdraw(*this); }

namespace {

void spawn_ranks(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  const int stages = stages_of(st), tp = st.cfg.tensor_ranks;
  const auto& mc = st.model->config();
  ++st.generation;
  st.ranks.assign(std::size_t(stages * tp), worker_actor{});
  st.caches.assign(std::size_t(stages * tp), nullptr);
  st.sources.assign(std::size_t(stages * tp), {});
  st.comms.clear();
  for (int s = 0; s < stages; ++s) {
    std::vector<std::unique_ptr<collectives::communicator>> group;
    if (tp > 1) group = collectives::make_shm_group({tp, st.generation, st.cfg.step_timeout});
    const auto [a, b] = rank_layers(st.model->num_layers(), s, stages);
    for (int t = 0; t < tp; ++t) {
      const std::size_t i = std::size_t(s * tp + t);
      const auto& shard = st.shards[std::size_t(t)];
      auto cache = std::make_shared<kv::kv_cache>(st.cache, b - a, shard->kv_heads(), mc.head_dim);
      st.sources[i] = kv::transfer::registry::global().expose(cache);
      st.caches[i] = cache;
      std::shared_ptr<collectives::fault_injector> comm;
      if (tp > 1) {
        comm = std::make_shared<collectives::fault_injector>(std::shared_ptr<collectives::communicator>(std::move(group[std::size_t(t)])));
        st.comms.push_back(comm);
      }
      auto me = caf::actor_cast<caf::actor>(self);
      // Tensor ranks wait inside collectives, so each has a thread of its own.
      st.ranks[i] = tp > 1 ? self->spawn<caf::monitored + caf::detached>(worker, shard, cache, a, b, s == stages - 1, comm, me)
                           : self->spawn<caf::monitored>(worker, shard, cache, a, b, s == stages - 1, comm, me);
    }
  }
  if (st.scheduler) caf::anon_send(st.scheduler, kv_sources_atom::value, st.sources);
}

// A pull's copy, off the ranks' and the supervisor's threads: a detached actor that answers one
// request and ends. It holds this generation's caches, so a restart meanwhile leaves it writing
// caches nobody reads any more. With tensor ranks, each rank's heads are a cache of their own:
// receiving rank (s, t) pulls from the sending ranks t of the stages that hold its layers.
caf::behavior pull_helper(caf::event_based_actor* self, std::vector<std::shared_ptr<kv::kv_cache>> caches,
                          std::vector<std::pair<int, int>> ranges, int tp) {
  return {[=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
    self->quit();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(x.timeout_ms);
    std::uint64_t bytes = 0;
    try {
      if (auto why = kv::transfer::layout_mismatch(x.from.layout, x.mine)) throw kv::transfer::transfer_error(*why);
      for (std::size_t r = 0; r < caches.size(); ++r) {
        kv::transfer::kv_handle from = x.from;
        kv::transfer::kv_layout mine = x.mine;
        if (tp > 1) {  // rank t's heads only, as if they were a whole model's
          from.sources.clear();
          for (std::size_t k = r % std::size_t(tp); k < x.from.sources.size(); k += std::size_t(tp))
            from.sources.push_back(x.from.sources[k]);
          for (auto* l : {&from.layout, &mine}) l->n_kv_heads /= tp, l->tensor_parallel = 1;
        }
        bytes += kv::transfer::pull(from, {caches[r].get(), ranges[r / std::size_t(tp)].first, mine, x.table}, x.how, deadline).bytes;
      }
    } catch (const kv::transfer::transfer_error& e) {
      return caf::make_error(caf::sec::runtime_error, e.what());
    }
    return bytes;
  }};
}

void stop_ranks(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  withdraw(self->state);
  // Ranks waiting in a collective wake with an error first; then every rank goes.
  for (auto& c : self->state.comms) c->abort(why);
  self->state.comms.clear();
  for (auto& r : self->state.ranks) {
    if (!r) continue;  // the rank whose death this is
    self->state.retired.insert(r.address());  // still monitored: `ready` waits for it to end
    self->send_exit(r, caf::exit_reason::kill);
  }
  self->state.ranks.clear();
}

// Replaces every rank; false when the restart limit is spent (the caller gives up).
bool restart(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  while (!st.recent.empty() && now - st.recent.front() > st.cfg.restart_window) st.recent.pop_front();
  log::warn("worker_group_restart", {{"generation", st.generation}, {"why", why}});
  stop_ranks(self, "generation " + std::to_string(st.generation) + " stopped: " + why);
  if (int(st.recent.size()) >= st.cfg.max_restarts) return false;
  st.recent.push_back(now);
  ++st.restarts;
  spawn_ranks(self);
  // The KV the scheduler thinks its blocks hold is gone; a step running now fails (the caller
  // answers it), else the next one does, so the scheduler recomputes before it relies on it.
  st.kv_lost = !st.step;
  return true;
}

group_status status_of(const group_state& st) {
  const int stages = stages_of(st);
  return {std::uint32_t(st.ranks.size()), st.restarts, std::uint32_t(stages), std::uint32_t(st.cfg.tensor_ranks), st.generation};
}

void restart_or_quit(group_actor::stateful_pointer<group_state> self, const std::string& why) {
  if (!restart(self, why))
    self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after " + std::to_string(self->state.restarts) +
                                                            " restarts (last: " + why + ")"));
}

// The running step `id` failed: it answers with the error, and the group restarts if the failure
// was in the generation it ran on (a later generation is already fresh).
void fail_step(group_actor::stateful_pointer<group_state> self, std::uint64_t id, const std::string& why) {
  auto& st = self->state;
  if (!st.step || st.step->id != id) return;  // answered already
  auto promise = st.step->promise;
  if (st.step->generation == st.generation) restart_or_quit(self, why);  // this step carries the news of the lost KV
  st.step.reset();
  promise.deliver(caf::make_error(caf::sec::runtime_error, "step failed: " + why));
}

void run_stage(group_actor::stateful_pointer<group_state> self, int stage, std::size_t m, std::vector<float> hidden);

// Stage `stage` of the step's micro-batch m is done: on to the next stage, or its tokens.
void stage_done(group_actor::stateful_pointer<group_state> self, std::uint64_t id, int stage, std::size_t m, stage_output out) {
  auto& st = self->state;
  if (!st.step || st.step->id != id) return;
  auto& counts = st.step->expert_tokens;
  counts.resize(std::max(counts.size(), out.result.expert_tokens.size()));
  for (std::size_t e = 0; e < out.result.expert_tokens.size(); ++e) counts[e] += out.result.expert_tokens[e];
  if (stage + 1 < stages_of(st)) return run_stage(self, stage + 1, m, std::move(out.hidden));
  auto& step = *st.step;
  const auto& rows = step.micro[m].rows;
  if (out.result.tokens.size() != rows.size()) return fail_step(self, id, "the last stage chose the wrong number of tokens");
  for (std::size_t i = 0; i < rows.size(); ++i) step.tokens[std::size_t(rows[i])] = std::move(out.result.tokens[i]);
  if (--step.left > 0) return;
  engine::step_result r;
  r.tokens = std::move(step.tokens);
  r.expert_tokens = std::move(step.expert_tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step.started).count();
  auto promise = step.promise;
  st.step.reset();
  promise.deliver(std::move(r));
}

// Sends micro-batch m to every rank of `stage`. A stage's ranks take micro-batches in the order
// they are sent (one sender, in order), so their collectives line up. The last stage is the
// plan's last use (only its rows are needed after), so the plan moves there, and the input
// moves into the last rank's message: one stage, one rank copies nothing.
void run_stage(group_actor::stateful_pointer<group_state> self, int stage, std::size_t m, std::vector<float> hidden) {
  auto& st = self->state;
  const std::uint64_t id = st.step->id;
  const int tp = st.cfg.tensor_ranks;
  auto& plan = st.step->micro[m].plan;
  stage_input in{stage + 1 == stages_of(st) ? std::move(plan) : plan, std::move(hidden)};
  for (int t = 0; t < tp; ++t)
    self->request(st.ranks[std::size_t(stage * tp + t)], st.cfg.step_timeout, execute_atom::value,
                  t + 1 == tp ? std::move(in) : in)
        .then(
            [=](stage_output& out) {
              if (t == 0) stage_done(self, id, stage, m, std::move(out));
            },
            [=](caf::error& e) {
              fail_step(self, id, "stage " + std::to_string(stage) + " rank " + std::to_string(t) + ": " + self->system().render(e));
            });
}

}  // namespace

group_actor::behavior_type group_supervisor(group_actor::stateful_pointer<group_state> self,
                                            std::shared_ptr<const model::llama_model> model,
                                            kv::kv_cache_config cache, group_config cfg, caf::actor scheduler) {
  auto& st = self->state;
  st.model = std::move(model);
  st.cache = cache;
  st.cfg = cfg;
  st.cfg.tensor_ranks = std::max(1, st.cfg.tensor_ranks);
  st.cfg.micro_batches = std::max(1, st.cfg.micro_batches);
  st.scheduler = scheduler;
  st.cfg.pipeline_ranks = group_ranks(st.cfg, st.model->num_layers());
  if (st.cfg.tensor_ranks == 1)
    st.shards = {st.model};
  else
    for (int t = 0; t < st.cfg.tensor_ranks; ++t)
      st.shards.push_back(model::shared_shard(st.model->dir(), {t, st.cfg.tensor_ranks, st.cfg.expert_parallel}));
  spawn_ranks(self);
  self->monitor(scheduler);
  // A rank's death restarts the group (monitors, not links: a rank killed with
  // exit_reason::kill must not take the supervisor with it). The scheduler's death ends it.
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& st = self->state;
    const auto it = std::find_if(st.ranks.begin(), st.ranks.end(), [&](const worker_actor& r) { return r.address() == m.source; });
    if (it == st.ranks.end()) {
      if (!st.retired.erase(m.source)) return self->quit(m.reason);  // the scheduler
      if (st.retired.empty()) {  // an earlier generation's last rank: the group is whole
        for (auto& p : st.waiting_ready) p.deliver(status_of(st));
        st.waiting_ready.clear();
      }
      return;
    }
    const auto i = int(it - st.ranks.begin());
    *it = worker_actor{};  // gone already: nothing to stop
    const std::string why = "stage " + std::to_string(i / st.cfg.tensor_ranks) + " rank " + std::to_string(i % st.cfg.tensor_ranks) +
                            " died: " + self->system().render(m.reason);
    if (st.step && st.step->generation == st.generation)
      fail_step(self, st.step->id, why);  // restarts the group
    else
      restart_or_quit(self, why);
  });
  return {
      [=](execute_atom, stage_input& in) -> caf::result<engine::step_result> {
        auto& st = self->state;
        if (st.step) return caf::make_error(caf::sec::runtime_error, "a step is already running on this group");
        if (st.kv_lost) {
          st.kv_lost = false;
          return caf::make_error(caf::sec::runtime_error, "the group restarted since the last step: its KV is lost");
        }
        const std::size_t rows = in.plan.logit_rows.size();
        auto micro = engine::split_plan(std::move(in.plan), st.cfg.micro_batches);
        if (micro.empty()) return engine::step_result{};
        auto& step = st.step.emplace();
        step.id = ++st.next_step;
        step.generation = st.generation;
        step.promise = self->make_response_promise<engine::step_result>();
        step.tokens.resize(rows);
        step.left = micro.size();
        step.micro = std::move(micro);
        step.started = std::chrono::steady_clock::now();
        auto promise = step.promise;
        for (std::size_t m = 0; m < step.left; ++m) run_stage(self, 0, m, {});
        return promise;
      },
      [=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        std::vector<std::pair<int, int>> ranges;
        const int stages = stages_of(st);
        for (int r = 0; r < stages; ++r) ranges.push_back(rank_layers(st.model->num_layers(), r, stages));
        auto helper = self->spawn<caf::detached>(pull_helper, st.caches, std::move(ranges), st.cfg.tensor_ranks);
        auto rp = self->make_response_promise<std::uint64_t>();
        const auto limit = std::chrono::milliseconds(x.timeout_ms) + std::chrono::seconds(5);
        self->request(helper, limit, pull_atom::value, std::move(x))
            .then([rp](std::uint64_t bytes) mutable { rp.deliver(bytes); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](ready_atom) -> caf::result<group_status> {
        auto& st = self->state;
        if (st.retired.empty()) return status_of(st);
        // Earlier ranks still running (one waking from an aborted collective): not whole yet.
        st.waiting_ready.push_back(self->make_response_promise<group_status>());
        return st.waiting_ready.back();
      },
      [=](restart_atom) -> caf::result<group_status> {
        auto& st = self->state;
        if (st.step) fail_step(self, st.step->id, "the step passed its deadline");
        else if (!restart(self, "the step passed its deadline")) {
          self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after a hung step"));
          return caf::make_error(caf::sec::runtime_error, "worker group gave up");
        }
        return status_of(self->state);
      },
      [=](ranks_atom) { return self->state.ranks; },
  };
}

}  // namespace troupe::actors
