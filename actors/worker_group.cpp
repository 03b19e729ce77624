#include "actors/worker_group.h"

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
  cfg.add_message_type<sampling::sampling_row>("troupe.sampling_row");
  cfg.add_message_type<sampling::sampled_token>("troupe.sampled_token");
  cfg.add_message_type<group_status>("troupe.group_status");
  cfg.add_message_type<worker_actor>("troupe.worker_actor");
  cfg.add_message_type<std::vector<worker_actor>>("troupe.worker_actors");
}

std::pair<int, int> rank_layers(int layers, int r, int n) { return {layers * r / n, layers * (r + 1) / n}; }


worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, std::shared_ptr<kv::kv_cache> cache,
                                   int first, int last, worker_actor next, caf::actor supervisor) {
  auto& st = self->state;
  self->monitor(supervisor);  // a rank lives no longer than its group
  self->set_down_handler([=](const caf::down_msg& m) { self->quit(m.reason); });
  st.cache = std::move(cache);
  st.model = std::move(model);
  st.first = first;
  st.last = last;
  st.next = std::move(next);
  return {
      [=](execute_atom, stage_input& in) -> caf::result<engine::step_result> {
        auto& st = self->state;
        const auto t0 = std::chrono::steady_clock::now();
        const model::forward_batch b = engine::view(in.plan);
        if (st.first == 0)
          st.model->embed(b, st.ws);
        else
          st.ws.x = std::move(in.hidden);
        st.model->run_layers(b, st.first, st.last, *st.cache, st.ws);
        auto spent = [&] { return in.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
        if (st.next) {
          stage_input out{std::move(in.plan), std::move(st.ws.x), spent()};
          return self->delegate(st.next, execute_atom::value, std::move(out));
        }
        // The last rank chooses the tokens where the logits are; only ids leave it.
        const auto& mc = st.model->config();
        st.logits.resize(in.plan.logit_rows.size() * std::size_t(mc.vocab_size));
        st.model->head(b, st.ws, st.logits.data());
        engine::step_result r;
        r.tokens = sampling::sample_rows(st.logits, in.plan.sampling, mc.vocab_size, mc.eos_token_ids);
        r.seconds = spent();
        return r;
      },
  };
}

namespace {

void withdraw(group_state& st) {
  for (const auto& s : st.sources) kv::transfer::registry::global().withdraw(s.key);
  st.sources.clear();
  st.caches.clear();
}

}  // namespace

group_state::~group_state() { withdraw(*this); }

namespace {

void spawn_ranks(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  const int n = st.cfg.pipeline_ranks;
  const auto& mc = st.model->config();
  st.ranks.assign(std::size_t(n), worker_actor{});
  st.caches.assign(std::size_t(n), nullptr);
  st.sources.assign(std::size_t(n), {});
  worker_actor next;
  for (int r = n - 1; r >= 0; --r) {  // last first, so each rank knows the one after it
    auto [a, b] = rank_layers(st.model->num_layers(), r, n);
    auto cache = std::make_shared<kv::kv_cache>(st.cache, b - a, mc.num_key_value_heads, mc.head_dim);
    st.sources[std::size_t(r)] = kv::transfer::registry::global().expose(cache);
    st.caches[std::size_t(r)] = cache;
    next = self->spawn<caf::monitored>(worker, st.model, cache, a, b, next, caf::actor_cast<caf::actor>(self));
    st.ranks[std::size_t(r)] = next;
  }
  if (st.scheduler) caf::anon_send(st.scheduler, kv_sources_atom::value, st.sources);
}

// A pull's copy, off the ranks' and the supervisor's threads: a detached actor that answers one
// request and ends. It holds this generation's caches, so a restart meanwhile leaves it writing
// caches nobody reads any more.
caf::behavior pull_helper(caf::event_based_actor* self, std::vector<std::shared_ptr<kv::kv_cache>> caches,
                          std::vector<std::pair<int, int>> ranges) {
  return {[=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
    self->quit();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(x.timeout_ms);
    std::uint64_t bytes = 0;
    try {
      for (std::size_t r = 0; r < caches.size(); ++r)
        bytes += kv::transfer::pull(x.from, {caches[r].get(), ranges[r].first, x.mine, x.table}, x.how, deadline).bytes;
    } catch (const kv::transfer::transfer_error& e) {
      return caf::make_error(caf::sec::runtime_error, e.what());
    }
    return bytes;
  }};
}

void stop_ranks(group_actor::stateful_pointer<group_state> self) {
  withdraw(self->state);
  for (auto& r : self->state.ranks) {
    self->state.retired.insert(r.address());
    self->demonitor(r.address());
    self->send_exit(r, caf::exit_reason::kill);
  }
  self->state.ranks.clear();
}

// Replaces every rank; false when the restart limit is spent (the caller gives up).
bool restart(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  const auto now = std::chrono::steady_clock::now();
  while (!st.recent.empty() && now - st.recent.front() > st.cfg.restart_window) st.recent.pop_front();
  stop_ranks(self);
  if (int(st.recent.size()) >= st.cfg.max_restarts) return false;
  st.recent.push_back(now);
  ++st.restarts;
  spawn_ranks(self);
  return true;
}

group_status status_of(const group_state& st) { return {std::uint32_t(st.ranks.size()), st.restarts}; }

}  // namespace

group_actor::behavior_type group_supervisor(group_actor::stateful_pointer<group_state> self,
                                            std::shared_ptr<const model::llama_model> model,
                                            kv::kv_cache_config cache, group_config cfg, caf::actor scheduler) {
  auto& st = self->state;
  st.model = std::move(model);
  st.cache = cache;
  st.cfg = cfg;
  st.scheduler = scheduler;
  st.cfg.pipeline_ranks = group_ranks(st.cfg, st.model->num_layers());
  spawn_ranks(self);
  self->monitor(scheduler);
  // A rank's death restarts the group (monitors, not links: a rank killed with
  // exit_reason::kill must not take the supervisor with it). The scheduler's death ends it.
  self->set_down_handler([=](const caf::down_msg& m) {
    auto& st = self->state;
    const bool current = std::any_of(st.ranks.begin(), st.ranks.end(), [&](const worker_actor& r) { return r.address() == m.source; });
    if (!current) {
      if (st.retired.count(m.source)) return;  // an earlier generation's rank: done with
      return self->quit(m.reason);             // the scheduler
    }
    if (!restart(self))
      self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after " +
                                                              std::to_string(st.restarts) + " restarts"));
  });
  return {
      [=](execute_atom, stage_input& in) -> caf::result<engine::step_result> {
        return self->delegate(self->state.ranks.front(), execute_atom::value, std::move(in));
      },
      [=](pull_atom, kv_pull& x) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        std::vector<std::pair<int, int>> ranges;
        for (int r = 0; r < int(st.caches.size()); ++r) ranges.push_back(rank_layers(st.model->num_layers(), r, int(st.caches.size())));
        auto helper = self->spawn<caf::detached>(pull_helper, st.caches, std::move(ranges));
        auto rp = self->make_response_promise<std::uint64_t>();
        const auto limit = std::chrono::milliseconds(x.timeout_ms) + std::chrono::seconds(5);
        self->request(helper, limit, pull_atom::value, std::move(x))
            .then([rp](std::uint64_t bytes) mutable { rp.deliver(bytes); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](ready_atom) { return status_of(self->state); },
      [=](restart_atom) -> caf::result<group_status> {
        if (!restart(self)) {
          self->quit(caf::make_error(caf::sec::runtime_error, "worker group gave up after a hung step"));
          return caf::make_error(caf::sec::runtime_error, "worker group gave up");
        }
        return status_of(self->state);
      },
      [=](ranks_atom) { return self->state.ranks; },
  };
}

}  // namespace troupe::actors
