// `rollout POOL --model DIR ...`, `rollout status|pause|resume`, `rollback POOL`: a canary of a
// new revision takes a growing share of a pool's traffic, judged every second against the
// baseline on the request owner's live figures; promoted to every replica after its last step,
// or rolled back at the first breach (docs/admin.md). The decisions are runtime/admin/rollout.h's;
// this carries them out: canary replicas through the swap machinery (admin_swap.cpp), the split
// through the router, and each decision to `watch` and the log with its reason.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <tuple>

#include "actors/control/admin_actor.h"
#include "actors/control/admin_ops.h"
#include "actors/protocol/error_text.h"
#include "runtime/admin/rollout.h"
#include "runtime/common/wall_clock.h"

namespace troupe::actors {

struct rollout_run {
  admin::rollout_request req;
  std::string model;  // the pool's model ("" : [model])
  std::string key;    // the canary's cache key, once its replicas run
  admin::swap_request baseline;  // what the pool ran before: a roll-back's target
  admin::rollout_phase phase = admin::rollout_phase::canary;
  std::size_t step = 0;
  double step_since = 0;    // when the step's share took effect (owner_clock_s)
  int serving_before = 0;   // the pool's serving replicas before it: brought back at the end
  bool busy = false;        // replicas moving: the tick leaves it alone
  double decided_at = 0;    // owner_clock_s of the last promote or roll-back decision
  nlohmann::json decisions = nlohmann::json::array();  // the latest, oldest first
};

namespace admin_ops {

namespace {

using run_ptr = std::shared_ptr<rollout_run>;
constexpr std::size_t decisions_kept = 32;

bool active(const rollout_run& r) {
  using admin::rollout_phase;
  return r.phase == rollout_phase::canary || r.phase == rollout_phase::paused || r.phase == rollout_phase::promoting ||
         r.phase == rollout_phase::rolling_back;
}

double share_of(const rollout_run& r) { return r.step < r.req.steps.size() ? r.req.steps[r.step].share : 1.0; }

nlohmann::json run_json(const rollout_run& r) {
  return {{"pool", r.req.pool},
          {"phase", admin::phase_name(r.phase)},
          {"model", r.req.dir},
          {"revision", r.req.revision},
          {"model_key", r.key},
          {"share", share_of(r)},
          {"step", r.step + 1},
          {"steps", r.req.steps.size()},
          {"held_s", r.phase == admin::rollout_phase::canary ? owner_clock_s() - r.step_since : 0.0},
          {"decisions", r.decisions}};
}

// A decision, to `watch`, the log and the run's record.
void record(admin_ptr self, rollout_run& r, const std::string& decision, const std::string& why) {
  nlohmann::json d{{"at", unix_seconds()}, {"decision", decision}, {"share", share_of(r)}, {"reason", why}};
  r.decisions.push_back(d);
  if (r.decisions.size() > decisions_kept) r.decisions.erase(r.decisions.begin());
  d["pool"] = r.req.pool;
  d["phase"] = admin::phase_name(r.phase);
  d["model_key"] = r.key;
  emit(self, "rollout", std::move(d));
}

// Back to the pool's size before the rollout (a canary may have taken a stopped slot).
void restore_size(admin_ptr self, const run_ptr& run, std::function<void()> then) {
  scale_pool(self, run->req.pool, run->serving_before, "rollout", [=](bool ok, nlohmann::json r) {
    if (!ok) record(self, *run, "resize_failed", r.is_string() ? r.get<std::string>() : r.dump());
    then();
  });
}

void roll_back(admin_ptr self, const run_ptr& run, const std::string& why) {
  run->phase = admin::rollout_phase::rolling_back;
  run->busy = true;
  run->decided_at = owner_clock_s();
  // New requests go to the baseline at once; the canary's replicas then drain (their requests
  // move on, recomputed) and come back on the model they were started with.
  self->send(self->state.cfg.router, canary_atom::value, run->model, run->key, 0.0);
  record(self, *run, "roll_back", why);
  swap_pool(self, run->baseline, -1, [=](std::optional<std::string> error, nlohmann::json) {
    if (error) {
      run->phase = admin::rollout_phase::failed;
      return record(self, *run, "failed", "rolling back: " + *error);
    }
    restore_size(self, run, [=] {
      run->phase = admin::rollout_phase::rolled_back;
      run->busy = false;
      record(self, *run, "rolled_back", "every replica runs the baseline again, " +
                                            std::to_string(int((owner_clock_s() - run->decided_at) * 1000)) + " ms after the decision");
    });
  });
}

void promote(admin_ptr self, const run_ptr& run, const std::string& why) {
  run->phase = admin::rollout_phase::promoting;
  run->busy = true;
  run->decided_at = owner_clock_s();
  self->send(self->state.cfg.router, canary_atom::value, run->model, run->key, 1.0);  // every sender on the new revision
  record(self, *run, "promote", why);
  swap_pool(self, {run->req.pool, run->req.dir, run->req.revision}, -1, [=](std::optional<std::string> error, nlohmann::json) {
    if (error) return roll_back(self, run, "promoting: " + *error);
    self->send(self->state.cfg.router, canary_atom::value, run->model, run->key, 0.0);  // one revision: no split
    restore_size(self, run, [=] {
      run->phase = admin::rollout_phase::promoted;
      run->busy = false;
      record(self, *run, "promoted", "every replica runs the new revision");
    });
  });
}

// Runs step `step`: enough canary replicas for its share, then the share to the router.
void enter_step(admin_ptr self, const run_ptr& run, std::size_t step, std::function<void(std::optional<std::string>)> then) {
  run->busy = true;
  const double share = run->req.steps[step].share;
  const int want = std::max(1, int(std::lround(share * run->serving_before)));
  swap_pool(self, {run->req.pool, run->req.dir, run->req.revision}, want, [=](std::optional<std::string> error, nlohmann::json result) {
    if (error) {
      then(error);
      return roll_back(self, run, "the canary's replicas did not start: " + *error);
    }
    run->key = result["model_key"].get<std::string>();
    run->step = step;
    self->send(self->state.cfg.router, canary_atom::value, run->model, run->key, share);
    run->step_since = owner_clock_s();
    run->busy = false;
    record(self, *run, "step", "the canary takes " + std::to_string(int(std::lround(share * 100))) + "% of the senders on " +
                                   std::to_string(want) + " replica(s)");
    then(std::nullopt);
  });
}

// The canary's and the baseline's figures since the step began, judged.
void judge(admin_ptr self, const run_ptr& run, const std::vector<replica_figures>& figures) {
  if (run->phase != admin::rollout_phase::canary || run->busy) return;
  admin::side_figures canary, baseline;
  for (const auto& f : figures) {
    if (f.replica >= self->state.replicas.size()) continue;
    const auto& r = self->state.replicas[f.replica];
    if (r.pool != run->req.pool) continue;
    (r.load.model_key == run->key ? canary : baseline).add(f);
  }
  const auto d = admin::decide(run->req, run->step, owner_clock_s() - run->step_since, admin::breach(canary, baseline, run->req.gate));
  using kind = admin::rollout_decision::kind;
  if (d.what == kind::roll_back) return roll_back(self, run, d.why);
  if (d.what == kind::promote) return promote(self, run, d.why);
  if (d.what == kind::advance) {
    record(self, *run, "advance", d.why);
    enter_step(self, run, run->step + 1, [](std::optional<std::string>) {});
  }
}

std::optional<std::string> unstartable(admin_ptr self, const admin::rollout_request& r) {
  const auto& st = self->state;
  const auto& pools = st.cfg.topo.pools;
  if (std::none_of(pools.begin(), pools.end(), [&](const topology::pool_spec& p) { return p.name == r.pool; }))
    return "no pool named '" + r.pool + "'";
  if (!st.cfg.owner) return std::string("this head has no request owner to measure the canary");
  auto it = st.rollouts.find(r.pool);
  if (it != st.rollouts.end() && active(*it->second))
    return "pool " + r.pool + " is in a rollout already (" + admin::phase_name(it->second->phase) + "; rollback " + r.pool + " ends it)";
  return std::nullopt;
}

void start_rollout(admin_ptr self, std::uint64_t token, const std::vector<std::string>& args) {
  auto parsed = admin::parse_rollout(args);
  if (auto* bad = std::get_if<std::string>(&parsed)) return refuse(self, token, "rollout: " + *bad);
  auto run = std::make_shared<rollout_run>();
  run->req = std::get<admin::rollout_request>(parsed);
  if (auto why = unstartable(self, run->req)) return refuse(self, token, "rollout: " + *why);
  for (const auto& p : self->state.cfg.topo.pools)
    if (p.name == run->req.pool) run->model = p.model;
  run->baseline.pool = run->req.pool;
  if (auto b = self->state.pool_revisions.find(run->req.pool); b != self->state.pool_revisions.end())
    std::tie(run->baseline.dir, run->baseline.revision) = b->second;
  emit(self, "admin", {{"command", "rollout"}, {"pool", run->req.pool}, {"model", run->req.dir}, {"revision", run->req.revision}});
  refresh(self, [=] {
    run->serving_before = admin::census_of(self->state.replicas, run->req.pool).serving;
    self->state.rollouts[run->req.pool] = run;
    enter_step(self, run, 0, [=](std::optional<std::string> error) {
      if (error) return refuse(self, token, "rollout " + run->req.pool + ": the canary did not start: " + *error);
      answer(self, token, run_json(*run));
    });
  });
}

}  // namespace

void cmd_rollout(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto& st = self->state;
  const std::string verb = cmd == "rollback" ? "rollback" : args.empty() ? "status" : args[0];
  if (verb != "status" && verb != "pause" && verb != "resume" && verb != "rollback") return start_rollout(self, token, args);
  const std::vector<std::string> rest(cmd == "rollback" ? args.begin() : args.begin() + 1, args.end());
  if (verb == "status") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [pool, run] : st.rollouts)
      if (rest.empty() || rest[0] == pool) out.push_back(run_json(*run));
    return answer(self, token, {{"rollouts", out}});
  }
  if (rest.size() != 1) return refuse(self, token, cmd + ": expected one pool name");
  auto it = st.rollouts.find(rest[0]);
  if (it == st.rollouts.end() || !active(*it->second)) return refuse(self, token, cmd + ": no rollout of pool '" + rest[0] + "' is under way");
  const run_ptr run = it->second;
  emit(self, "admin", {{"command", cmd == "rollback" ? cmd : "rollout " + verb}, {"pool", rest[0]}});
  using admin::rollout_phase;
  if (run->busy || run->phase == rollout_phase::promoting || run->phase == rollout_phase::rolling_back)
    return refuse(self, token, cmd + ": the rollout of " + rest[0] + " is " + (run->busy ? "moving replicas" : admin::phase_name(run->phase)) +
                                   "; try again in a moment");
  if (verb == "pause" || verb == "resume") {
    if ((verb == "pause") != (run->phase == rollout_phase::canary)) return refuse(self, token, cmd + ": the rollout is " + admin::phase_name(run->phase));
    run->phase = verb == "pause" ? rollout_phase::paused : rollout_phase::canary;
    run->step_since = owner_clock_s();  // a resumed step is judged, and held, from now
    record(self, *run, verb == "pause" ? "paused" : "resumed", "by the admin console");
    return answer(self, token, run_json(*run));
  }
  roll_back(self, run, "by the admin console");
  answer(self, token, run_json(*run));
}

void rollout_tick(admin_ptr self) {
  for (const auto& [pool, run] : self->state.rollouts) {
    if (run->phase != admin::rollout_phase::canary || run->busy) continue;
    self->request(self->state.cfg.owner, self->state.cfg.timeout, figures_atom::value, run->step_since)
        .then([=](const std::vector<replica_figures>& f) { judge(self, run, f); }, [](caf::error&) {});
  }
}

}  // namespace admin_ops

}  // namespace troupe::actors
