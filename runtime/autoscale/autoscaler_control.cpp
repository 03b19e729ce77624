#include "runtime/autoscale/autoscaler_control.h"

#include "runtime/admin/admin_message.h"

namespace troupe::autoscale {

std::variant<command, std::string> parse_command(const std::vector<std::string>& args) {
  const std::string what = args.empty() ? "status" : args[0];
  command c;
  if (what == "status" && args.size() <= 1) return c;
  if ((what == "pause" || what == "resume") && args.size() == 1) {
    c.what = what == "pause" ? command::verb::pause : command::verb::resume;
    return c;
  }
  if ((what == "pin" || what == "unpin") && args.size() == 2) {
    c.what = what == "pin" ? command::verb::pin : command::verb::unpin;
    c.pool = args[1];
    return c;
  }
  if (what == "set" && args.size() >= 2) {
    c.what = command::verb::set;
    if (auto bad = admin::parse_key_numbers(args, 1, c.settings)) return *bad;
    return c;
  }
  return std::string("autoscaler: expected status, pause, resume, pin POOL, unpin POOL or set KEY=VALUE ...");
}

std::optional<std::string> apply_settings(autoscale_config& cfg, const std::vector<std::pair<std::string, double>>& settings) {
  const std::map<std::string, double autoscale_config::*> keys = {
      {"queue_up", &autoscale_config::queue_up}, {"queue_down", &autoscale_config::queue_down}, {"kv_up", &autoscale_config::kv_up},
      {"kv_down", &autoscale_config::kv_down},   {"ttft_slo", &autoscale_config::ttft_slo_s},   {"itl_slo", &autoscale_config::itl_slo_s},
      {"busy_down", &autoscale_config::busy_down}};
  autoscale_config c = cfg;
  for (const auto& [k, v] : settings) {
    if (v < 0) return k + " must not be negative";
    auto key = keys.find(k);
    if (key == keys.end()) return "no autoscaler parameter '" + k + "' (queue_up, queue_down, kv_up, kv_down, busy_down, ttft_slo, itl_slo)";
    c.*(key->second) = v;
  }
  if (c.queue_down >= c.queue_up || c.kv_down >= c.kv_up) return std::string("queue_down must stay below queue_up and kv_down below kv_up");
  cfg = c;
  return std::nullopt;
}

nlohmann::json view_json(const view& v) {
  const autoscale_config& c = v.cfg;
  return {{"paused", v.paused},
          {"pinned", v.pinned},
          {"last_decisions", v.last},
          {"policy",
           {{"queue_up", c.queue_up}, {"queue_down", c.queue_down}, {"kv_up", c.kv_up}, {"kv_down", c.kv_down},
            {"ttft_slo", c.ttft_slo_s}, {"itl_slo", c.itl_slo_s}, {"up_for_ms", c.up_for.count()}, {"down_for_ms", c.down_for.count()},
            {"cooldown_ms", c.cooldown.count()}, {"busy_down", c.busy_down}}}};
}

}  // namespace troupe::autoscale
