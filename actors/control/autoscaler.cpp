#include "actors/control/autoscaler.h"

#include "actors/protocol/error_text.h"
#include "runtime/common/log.h"

namespace troupe::actors {

namespace {

using as_ptr = autoscaler_actor::stateful_pointer<autoscaler_state>;

autoscale::view view_of(as_ptr self) {
  const auto& st = self->state;
  return {st.paused, st.pinned, st.last, st.cfg};
}

// Has the admin actor scale `pool` to `target`; a failed scale waits a cooldown before the
// pool is looked at again (no warm replica left, say): one line per try.
void scale(as_ptr self, const std::string& pool, int target, const std::string& reason) {
  self->request(self->state.admin, std::chrono::minutes(15), scale_atom::value, pool, std::int32_t(target), "autoscaler: " + reason)
      .then([=](bool) { self->state.busy.erase(pool); },
            [=](caf::error& e) {
              self->state.busy.erase(pool);
              self->state.failed_at[pool] = autoscale::clock::now();
              log::warn("autoscale_failed", {{"pool", pool}, {"error", error_message(self->system(), e)}});
            });
}

// The policy's decision for each pool not pinned, busy or cooling down after a failure.
void decide(as_ptr self, const pool_signal_map& pools) {
  auto& st = self->state;
  if (st.paused) return;
  const auto now = autoscale::clock::now();
  for (const auto& [pool, s] : pools) {
    if (st.pinned.count(pool) || st.busy.count(pool)) continue;
    if (auto f = st.failed_at.find(pool); f != st.failed_at.end() && now - f->second < st.cfg.cooldown) continue;
    const autoscale::decision d = autoscale::decide(st.cfg, s, st.memory[pool], now);
    if (d.target == s.serving) continue;
    st.busy.insert(pool);
    st.last[pool] = std::to_string(s.serving) + " -> " + std::to_string(d.target) + ": " + d.reason;
    log::info("autoscale", {{"pool", pool}, {"from", s.serving}, {"to", d.target}, {"reason", d.reason}});
    scale(self, pool, d.target, d.reason);
  }
}

void look(as_ptr self) {
  auto& st = self->state;
  if (st.paused) return;
  const auto fresh = std::max(st.cfg.up_for, st.cfg.down_for);
  self->request(st.admin, st.cfg.interval * 5, signals_atom::value, fresh)
      .then([=](const pool_signal_map& pools) { decide(self, pools); }, [=](caf::error&) {});
}

caf::result<autoscale::view> run(as_ptr self, const autoscale::command& c) {
  auto& st = self->state;
  using verb = autoscale::command::verb;
  switch (c.what) {
    case verb::status:
      break;
    case verb::pause:
    case verb::resume:
      st.paused = c.what == verb::pause;
      log::info("autoscaler", {{"paused", st.paused}});
      break;
    case verb::pin:
    case verb::unpin:
      if (c.what == verb::pin)
        st.pinned.insert(c.pool);
      else
        st.pinned.erase(c.pool);
      st.memory.erase(c.pool);  // signals start over when a pool is let go
      break;
    case verb::set:
      if (auto bad = autoscale::apply_settings(st.cfg, c.settings)) return caf::make_error(caf::sec::invalid_argument, *bad);
      log::info("autoscaler_policy", {{"queue_up", st.cfg.queue_up}, {"queue_down", st.cfg.queue_down}, {"kv_up", st.cfg.kv_up},
                                      {"kv_down", st.cfg.kv_down}, {"ttft_slo", st.cfg.ttft_slo_s}, {"itl_slo", st.cfg.itl_slo_s}});
      break;
  }
  return view_of(self);
}

}  // namespace

autoscaler_actor::behavior_type autoscaler(autoscaler_actor::stateful_pointer<autoscaler_state> self, autoscale::autoscale_config cfg,
                                           admin_actor admin) {
  self->state.cfg = cfg;
  self->state.admin = std::move(admin);
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        look(self);
        self->delayed_send(self, self->state.cfg.interval, tick_atom::value);
      },
      [=](autoscaler_atom, const autoscale::command& c) { return run(self, c); },
  };
}

}  // namespace troupe::actors
