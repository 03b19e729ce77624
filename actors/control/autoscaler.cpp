#include "actors/control/autoscaler.h"

#include <nlohmann/json.hpp>

#include "actors/protocol/error_text.h"
#include "runtime/admin/admin_message.h"
#include "runtime/common/log.h"

namespace troupe::actors {

namespace {

using as_ptr = autoscaler_actor::stateful_pointer<autoscaler_state>;

// The policy's view of each pool, from `status`. A latency not measured within `fresh` (a
// pool with no traffic, or none finishing) is no signal: an old spike's TTFT must not hold a
// quiet pool up.
std::map<std::string, autoscale::pool_signals> signals_of(const nlohmann::json& status, std::chrono::milliseconds fresh) {
  std::map<std::string, autoscale::pool_signals> out;
  const double fresh_s = std::chrono::duration<double>(fresh).count();
  auto recent = [&](const nlohmann::json& p, const char* value, const char* age) {
    const double a = p.value(age, -1.0);
    return a >= 0 && a <= fresh_s ? p.value(value, 0.0) : 0.0;
  };
  for (const auto& p : status["pools"]) {
    auto& s = out[p["name"].get<std::string>()];
    s.serving = p.value("replicas", 0);
    s.min = p.value("min", 1);
    s.max = p.value("max", 1);
    s.slots = p.value("slots", 0);
    s.ttft_s = recent(p, "ttft_s", "ttft_age_s");
    s.itl_s = recent(p, "itl_s", "itl_age_s");
  }
  std::map<std::string, int> counted;
  for (const auto& r : status["replicas"]) {
    if (r.value("state", "") != "running") continue;
    const std::string pool = r.value("pool", "");
    auto it = out.find(pool);
    if (it == out.end()) continue;
    it->second.waiting += r.value("waiting", 0);
    it->second.running += r.value("running", 0);
    it->second.kv_usage += r.value("kv_usage", 0.0);
    ++counted[pool];
  }
  for (auto& [pool, s] : out)
    if (counted[pool] > 0) s.kv_usage /= counted[pool];
  return out;
}

nlohmann::json state_json(as_ptr self) {
  const auto& st = self->state;
  return {{"paused", st.paused},
          {"pinned", st.pinned},
          {"last_decisions", st.last},
          {"policy",
           {{"queue_up", st.cfg.queue_up}, {"queue_down", st.cfg.queue_down}, {"kv_up", st.cfg.kv_up}, {"kv_down", st.cfg.kv_down},
            {"ttft_slo", st.cfg.ttft_slo_s}, {"itl_slo", st.cfg.itl_slo_s}, {"up_for_ms", st.cfg.up_for.count()}, {"down_for_ms", st.cfg.down_for.count()},
            {"cooldown_ms", st.cfg.cooldown.count()}, {"busy_down", st.cfg.busy_down}}}};
}

void look(as_ptr self) {
  auto& st = self->state;
  if (st.paused) return;
  self->request(st.admin, st.cfg.interval * 5, status_atom::value)
      .then(
          [=](const std::string& text) {
            auto& st = self->state;
            const auto status = nlohmann::json::parse(text, nullptr, false);
            if (!status.is_object() || st.paused) return;
            const auto now = autoscale::clock::now();
            for (const auto& [pool, s] : signals_of(status, std::max(st.cfg.up_for, st.cfg.down_for))) {
              if (st.pinned.count(pool) || st.busy.count(pool)) continue;
              if (auto f = st.failed_at.find(pool); f != st.failed_at.end() && now - f->second < st.cfg.cooldown) continue;
              const autoscale::decision d = autoscale::decide(st.cfg, s, st.memory[pool], now);
              if (d.target == s.serving) continue;
              st.busy.insert(pool);
              st.last[pool] = std::to_string(s.serving) + " -> " + std::to_string(d.target) + ": " + d.reason;
              log::info("autoscale", {{"pool", pool}, {"from", s.serving}, {"to", d.target}, {"reason", d.reason}});
              const std::string p = pool;
              self->request(st.admin, std::chrono::minutes(15), scale_atom::value, p, std::int32_t(d.target), "autoscaler: " + d.reason)
                  .then([=](bool) { self->state.busy.erase(p); },
                        [=](caf::error& e) {
                          self->state.busy.erase(p);
                          // Tried again only after a cooldown (no warm replica left, say): one line per try.
                          self->state.failed_at[p] = autoscale::clock::now();
                          log::warn("autoscale_failed", {{"pool", p}, {"error", error_message(self->system(), e)}});
                        });
            }
          },
          [=](caf::error&) {});
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
      [=](autoscaler_atom, const std::vector<std::string>& args) -> caf::result<std::string> {
        auto& st = self->state;
        const std::string what = args.empty() ? "status" : args[0];
        if (what == "status" && args.size() <= 1) return state_json(self).dump();
        if ((what == "pause" || what == "resume") && args.size() == 1) {
          st.paused = what == "pause";
          log::info("autoscaler", {{"paused", st.paused}});
          return state_json(self).dump();
        }
        if ((what == "pin" || what == "unpin") && args.size() == 2) {
          if (what == "pin")
            st.pinned.insert(args[1]);
          else
            st.pinned.erase(args[1]);
          st.memory.erase(args[1]);  // signals start over when a pool is let go
          return state_json(self).dump();
        }
        if (what == "set" && args.size() >= 2) {
          autoscale::autoscale_config c = st.cfg;
          std::vector<std::pair<std::string, double>> settings;
          if (auto bad = admin::parse_key_numbers(args, 1, settings)) return caf::make_error(caf::sec::invalid_argument, *bad);
          for (const auto& [k, v] : settings) {
            if (v < 0) return caf::make_error(caf::sec::invalid_argument, k + " must not be negative");
            if (k == "queue_up") c.queue_up = v;
            else if (k == "queue_down") c.queue_down = v;
            else if (k == "kv_up") c.kv_up = v;
            else if (k == "kv_down") c.kv_down = v;
            else if (k == "ttft_slo") c.ttft_slo_s = v;
            else if (k == "itl_slo") c.itl_slo_s = v;
            else if (k == "busy_down") c.busy_down = v;
            else
              return caf::make_error(caf::sec::invalid_argument,
                                     "no autoscaler parameter '" + k + "' (queue_up, queue_down, kv_up, kv_down, busy_down, ttft_slo, itl_slo)");
          }
          if (c.queue_down >= c.queue_up || c.kv_down >= c.kv_up)
            return caf::make_error(caf::sec::invalid_argument, "queue_down must stay below queue_up and kv_down below kv_up");
          st.cfg = c;
          log::info("autoscaler_policy", {{"queue_up", c.queue_up}, {"queue_down", c.queue_down}, {"kv_up", c.kv_up}, {"kv_down", c.kv_down},
                                          {"ttft_slo", c.ttft_slo_s}, {"itl_slo", c.itl_slo_s}});
          return state_json(self).dump();
        }
        return caf::make_error(caf::sec::invalid_argument,
                               "autoscaler: expected status, pause, resume, pin POOL, unpin POOL or set KEY=VALUE ...");
      },
  };
}

}  // namespace troupe::actors
