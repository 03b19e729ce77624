#include "actors/worker_group.h"

namespace troupe::actors {

void register_worker_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<engine::forward_plan>("troupe.forward_plan");
  cfg.add_message_type<stage_input>("troupe.stage_input");
  cfg.add_message_type<engine::kv_import>("troupe.kv_import");
  cfg.add_message_type<kv_export>("troupe.kv_export");
  cfg.add_message_type<std::vector<float>>("troupe.floats");
  cfg.add_message_type<engine::step_result>("troupe.step_result");
  cfg.add_message_type<sampling::sampling_row>("troupe.sampling_row");
  cfg.add_message_type<sampling::sampled_token>("troupe.sampled_token");
  cfg.add_message_type<group_status>("troupe.group_status");
  cfg.add_message_type<worker_actor>("troupe.worker_actor");
  cfg.add_message_type<std::vector<worker_actor>>("troupe.worker_actors");
}

std::pair<int, int> rank_layers(int layers, int r, int n) { return {layers * r / n, layers * (r + 1) / n}; }

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   std::shared_ptr<const model::llama_model> model, kv::kv_cache_config cache,
                                   int first, int last, worker_actor next, caf::actor supervisor) {
  auto& st = self->state;
  self->monitor(supervisor);  // a rank lives no longer than its group
  self->set_down_handler([=](const caf::down_msg& m) { self->quit(m.reason); });
  const auto& mc = model->config();
  st.cache = std::make_unique<kv::kv_cache>(cache, last - first, mc.num_key_value_heads, mc.head_dim);
  st.model = std::move(model);
  st.first = first;
  st.last = last;
  st.next = std::move(next);
  return {
      [=](execute_atom, stage_input& in) -> caf::result<engine::step_result> {
        auto& st = self->state;
        const auto t0 = std::chrono::steady_clock::now();
        const model::forward_batch b = engine::view(in.plan);
        const std::size_t kvd = std::size_t(st.model->config().kv_dim());
        for (const auto& imp : in.plan.imports)  // imported KV first: this rank's layers of it
          st.cache->import_kv(in.plan.tables[std::size_t(imp.seq)].data(), imp.positions,
                              imp.data.data() + std::size_t(st.first) * imp.positions * 2 * kvd);
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
      [=](export_atom, kv_export& x) -> caf::result<std::vector<float>> {
        auto& st = self->state;
        const auto& mc = st.model->config();
        const std::size_t per_layer = std::size_t(x.positions) * 2 * mc.kv_dim();
        if (x.data.size() != per_layer * std::size_t(mc.num_hidden_layers))
          return caf::make_error(caf::sec::invalid_argument, "kv export: payload of the wrong size");
        st.cache->export_kv(x.table.data(), x.positions, x.data.data() + std::size_t(st.first) * per_layer);
        if (st.next) return self->delegate(st.next, export_atom::value, std::move(x));
        return std::move(x.data);
      },
  };
}

namespace {

void spawn_ranks(group_actor::stateful_pointer<group_state> self) {
  auto& st = self->state;
  const int n = st.cfg.pipeline_ranks;
  st.ranks.assign(std::size_t(n), worker_actor{});
  worker_actor next;
  for (int r = n - 1; r >= 0; --r) {  // last first, so each rank knows the one after it
    auto [a, b] = rank_layers(st.model->num_layers(), r, n);
    next = self->spawn<caf::monitored>(worker, st.model, st.cache, a, b, next, caf::actor_cast<caf::actor>(self));
    st.ranks[std::size_t(r)] = next;
  }
}

void stop_ranks(group_actor::stateful_pointer<group_state> self) {
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
  if (st.cfg.pipeline_ranks < 1 || st.cfg.pipeline_ranks > st.model->num_layers())
    st.cfg.pipeline_ranks = std::max(1, std::min(st.cfg.pipeline_ranks, st.model->num_layers()));
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
      [=](export_atom, kv_export& x) -> caf::result<std::vector<float>> {
        const auto& mc = self->state.model->config();
        x.data.assign(std::size_t(mc.num_hidden_layers) * x.positions * 2 * mc.kv_dim(), 0.0f);
        return self->delegate(self->state.ranks.front(), export_atom::value, std::move(x));
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
