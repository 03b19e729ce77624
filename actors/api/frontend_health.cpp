#include "actors/api/frontend_health.h"

#include <set>

#include <nlohmann/json.hpp>

#include "actors/protocol/error_text.h"

namespace troupe::actors {

namespace {

// The body: how many serve, and by name those that do not (down: started by the topology or
// registered once, not alive now and not stopped on purpose; suspect: alive but silent).
nlohmann::json health_of(const frontend_config& cfg, const std::vector<replica_view>& views, std::uint32_t& serving) {
  nlohmann::json down = nlohmann::json::array(), suspect = nlohmann::json::array(), draining = nlohmann::json::array();
  serving = 0;
  std::set<std::uint32_t> seen;
  for (const auto& v : views) seen.insert(v.replica.value);
  for (auto id : cfg.started_replicas)  // never registered yet (its node not up, or paused)
    if (!seen.count(id)) down.push_back(topology::name_of(cfg.replica_names, id));
  for (const auto& v : views) {
    const std::string name = topology::name_of(cfg.replica_names, v.replica.value);
    if (v.stopped) continue;
    if (!v.alive) {
      down.push_back(name);
      continue;
    }
    if (v.draining) draining.push_back(name);
    if (v.suspect) suspect.push_back(name);
    if (!v.draining && !v.parked) ++serving;
  }
  const bool whole = down.empty() && suspect.empty();
  nlohmann::json out = {{"status", serving == 0 ? "unavailable" : whole ? "ok" : "degraded"}, {"replicas_live", serving}};
  if (!down.empty()) out["down"] = down;
  if (!suspect.empty()) out["suspect"] = suspect;
  if (!draining.empty()) out["draining"] = draining;
  return out;
}

}  // namespace

void answer_health(caf::event_based_actor* self, const frontend_config& cfg, const router_actor& router,
                   const std::shared_ptr<http::exchange>& ex) {
  const int retry_after = cfg.retry_after_s;
  const frontend_config* c = &cfg;  // the frontend's state outlives its requests
  self->request(router, cfg.request_timeout, view_atom::value)
      .then(
          [=](const std::vector<replica_view>& views) {
            std::uint32_t serving = 0;
            const nlohmann::json body = health_of(*c, views, serving);
            if (serving > 0) return ex->respond(200, "application/json", body.dump());
            ex->respond(503, "application/json", body.dump(), {{"Retry-After", std::to_string(retry_after)}});
          },
          [=](caf::error& e) {
            ex->respond(503, "application/json", nlohmann::json{{"status", "unavailable"}, {"error", "router: " + error_message(self->system(), e)}}.dump(),
                        {{"Retry-After", std::to_string(retry_after)}});
          });
}

}  // namespace troupe::actors
