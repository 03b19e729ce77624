#include "runtime/admin/rollout_record.h"

#include <map>

namespace troupe::admin {

nlohmann::json to_json(const rollout_record& r) {
  return {{"pool", r.pool},
          {"args", r.args},
          {"model", r.model},
          {"model_key", r.key},
          {"baseline", {{"dir", r.baseline_dir}, {"revision", r.baseline_revision}}},
          {"phase", phase_name(r.phase)},
          {"step", r.step},
          {"share", r.share},
          {"held_s", r.held_s},
          {"serving_before", r.serving_before},
          {"decisions", r.decisions},
          {"owner", r.owner},
          {"owner_start", r.owner_start},
          {"updated_at", r.updated_at}};
}

std::optional<rollout_record> record_from(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    rollout_record r;
    r.pool = j.at("pool").get<std::string>();
    r.args = j.at("args").get<std::vector<std::string>>();
    r.model = j.at("model").get<std::string>();
    r.key = j.at("model_key").get<std::string>();
    r.baseline_dir = j.at("baseline").at("dir").get<std::string>();
    r.baseline_revision = j.at("baseline").at("revision").get<std::string>();
    auto phase = phase_named(j.at("phase").get<std::string>());
    if (!phase) return std::nullopt;
    r.phase = *phase;
    r.step = j.at("step").get<std::size_t>();
    r.share = j.at("share").get<double>();
    r.held_s = j.at("held_s").get<double>();
    r.serving_before = j.at("serving_before").get<int>();
    r.decisions = j.at("decisions");
    r.owner = j.at("owner").get<std::string>();
    r.owner_start = j.at("owner_start").get<std::uint64_t>();
    r.updated_at = j.at("updated_at").get<double>();
    if (r.pool.empty() || !r.decisions.is_array()) return std::nullopt;
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::optional<rollout_phase> phase_named(const std::string& name) {
  for (auto p : {rollout_phase::canary, rollout_phase::paused, rollout_phase::promoting, rollout_phase::promoted, rollout_phase::rolling_back,
                 rollout_phase::rolled_back, rollout_phase::failed})
    if (name == phase_name(p)) return p;
  return std::nullopt;
}

record_action act_on(const rollout_record& r, const std::string& me, std::uint64_t my_start, bool running_it_here, double now,
                     double takeover_after_s) {
  if (running_it_here) return record_action::ignore;
  if (!under_way(r.phase)) return record_action::end_split;
  const bool my_earlier_process = r.owner == me && r.owner_start != my_start;
  if (my_earlier_process || now - r.updated_at > takeover_after_s) return record_action::take_over;
  return record_action::follow;
}

std::vector<rollout_record> newest_per_pool(const std::vector<std::string>& texts) {
  std::map<std::string, rollout_record> newest;
  for (const auto& t : texts) {
    auto r = record_from(t);
    if (!r) continue;
    auto it = newest.find(r->pool);
    if (it == newest.end() || r->updated_at > it->second.updated_at) newest[r->pool] = std::move(*r);
  }
  std::vector<rollout_record> out;
  for (auto& [pool, r] : newest) out.push_back(std::move(r));
  return out;
}

}  // namespace troupe::admin
