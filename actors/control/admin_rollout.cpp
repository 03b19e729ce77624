// `rollout POOL --model DIR ...`, `rollout status|pause|resume`, `rollback POOL`: a canary of a
// new revision takes a growing share of a pool's traffic, judged every second against the
// baseline on the request owner's live figures; promoted to every replica after its last step,
// or rolled back at the first breach (docs/admin.md). The decisions are runtime/admin/rollout.h's;
// this carries them out: canary replicas through the swap machinery (admin_swap.cpp), the split
// through the router, and each decision to `watch` and the log with its reason.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <tuple>
#include <variant>

#include "actors/control/admin_actor.h"
#include "actors/control/admin_ops.h"
#include "actors/control/quality_probe.h"
#include "actors/protocol/error_text.h"
#include "runtime/admin/rollout.h"
#include "runtime/admin/rollout_record.h"
#include "runtime/common/wall_clock.h"
#include "runtime/model/model_tokenizer.h"

namespace troupe::actors {

struct rollout_run {
  admin::rollout_request req;
  std::vector<std::string> args;  // as the command gave them: what a head taking over parses again
  std::string model;  // the pool's model ("" : [model])
  std::string key;    // the canary's cache key, once its replicas run
  admin::swap_request baseline;  // what the pool ran before: a roll-back's target
  admin::rollout_phase phase = admin::rollout_phase::canary;
  std::size_t step = 0;
  double step_since = 0;    // when the step's share took effect (owner_clock_s)
  int serving_before = 0;   // the pool's serving replicas before it: brought back at the end
  bool busy = false;        // replicas moving: the tick leaves it alone
  double decided_at = 0;    // owner_clock_s of the last promote or roll-back decision
  admin::quality_set quality;  // the quality gate's probes as token ids (empty: no quality gate)
  std::optional<admin::quality_sample> baseline_quality;  // probed once, on a baseline replica
  std::size_t quality_passed = std::numeric_limits<std::size_t>::max();  // the last step whose canary passed it
  std::uint64_t probes = 0;  // probes started, for their request ids
  nlohmann::json decisions = nlohmann::json::array();  // the latest, oldest first
};

namespace admin_ops {

namespace {

using run_ptr = std::shared_ptr<rollout_run>;
constexpr std::size_t decisions_kept = 32;

bool active(const rollout_run& r) { return admin::under_way(r.phase); }

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
          {"quality_gate", r.quality.empty() ? "off" : r.quality_passed == r.step ? "passed" : "pending"},
          {"decisions", r.decisions}};
}

// The run as the nodes keep it for a head that takes it over (runtime/admin/rollout_record.h).
void publish_record(admin_ptr self, const rollout_run& r) {
  const auto& st = self->state;
  if (!st.cfg.registry) return;
  admin::rollout_record rec;
  rec.pool = r.req.pool;
  rec.args = r.args;
  rec.model = r.model;
  rec.key = r.key;
  rec.baseline_dir = r.baseline.dir;
  rec.baseline_revision = r.baseline.revision;
  rec.phase = r.phase;
  rec.step = r.step;
  rec.share = r.phase == admin::rollout_phase::canary || r.phase == admin::rollout_phase::paused ? share_of(r) : 0.0;
  rec.held_s = r.phase == admin::rollout_phase::canary ? owner_clock_s() - r.step_since : 0.0;
  rec.serving_before = r.serving_before;
  rec.decisions = r.decisions;
  rec.owner = st.cfg.head;
  rec.owner_start = st.start_ns;
  rec.updated_at = unix_seconds();
  self->send(st.cfg.registry, rollout_record_atom::value, r.req.pool, admin::to_json(rec).dump());
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
  publish_record(self, r);
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

// How long one side has to answer its quality probes (they queue behind its live traffic).
constexpr std::chrono::seconds probe_timeout{120};

// A running replica of the pool on the canary's key (canary) or another (baseline), if any.
std::optional<std::size_t> probe_target(admin_ptr self, const rollout_run& r, bool canary) {
  const auto& st = self->state;
  for (std::size_t i = 0; i < st.replicas.size() && i < st.schedulers.size(); ++i) {
    const auto& rep = st.replicas[i];
    if (rep.pool == r.req.pool && admin::state_of(rep) == "running" && st.schedulers[i] && (rep.load.model_key == r.key) == canary) return i;
  }
  return std::nullopt;
}

// Whether a probe's outcome still concerns the rollout: the same step, not ended meanwhile.
bool still_judged(const rollout_run& r, std::size_t step) {
  return r.step == step && (r.phase == admin::rollout_phase::canary || r.phase == admin::rollout_phase::paused);
}

using sample_then = std::function<void(admin::quality_sample)>;

// Probes replica `index` with the run's quality set; a side that does not answer rolls the
// canary back (the gate cannot tell it is good).
void probe(admin_ptr self, const run_ptr& run, std::size_t index, const char* side, sample_then then) {
  const std::size_t step = run->step;
  const auto& rep = self->state.replicas[index];
  auto p = spawn_quality_probe(self->system(), self->state.schedulers[index], run->quality, run->model,
                               "quality-" + run->req.pool + "-" + std::to_string(++run->probes) + "-" + side, self->state.cfg.timeout);
  const std::string name = rep.name;
  self->request(p, probe_timeout, probe_atom::value)
      .then([=](const admin::quality_sample& s) { then(s); },
            [=](caf::error& e) {
              self->send_exit(p, caf::exit_reason::user_shutdown);
              if (still_judged(*run, step))
                roll_back(self, run, std::string("quality: the ") + side + " replica " + name + " did not answer the probes: " +
                                         error_message(self->system(), e));
            });
}

// The step's quality gate: the baseline's answers (once per rollout), then a canary replica's,
// compared; a breach rolls the canary back, a pass lets the step advance once held.
void check_quality(admin_ptr self, const run_ptr& run) {
  if (run->quality.empty()) return;
  const std::size_t step = run->step;
  const auto canary = probe_target(self, *run, true);
  const auto baseline = run->baseline_quality ? std::nullopt : probe_target(self, *run, false);
  if (!canary) return roll_back(self, run, "quality: no running canary replica to probe");
  if (!run->baseline_quality && !baseline) return roll_back(self, run, "quality: no running baseline replica to probe");
  auto judge_canary = [=] {
    probe(self, run, *canary, "canary", [=](const admin::quality_sample& c) {
      if (!still_judged(*run, step)) return;
      if (auto why = admin::quality_breach(c, *run->baseline_quality, run->req.quality)) return roll_back(self, run, *why);
      run->quality_passed = step;
      record(self, *run, "quality_passed", admin::quality_summary(c, *run->baseline_quality));
    });
  };
  if (run->baseline_quality) return judge_canary();
  probe(self, run, *baseline, "baseline", [=](const admin::quality_sample& b) {
    run->baseline_quality = b;
    if (still_judged(*run, step)) judge_canary();
  });
}

// The gate's files, read and tokenized on this head with the new revision's tokenizer (a swap
// requires it to read text as the baseline's does); or why not.
std::optional<std::string> load_quality(rollout_run& r) {
  const auto& g = r.req.quality;
  if (!g.on()) return std::nullopt;
  auto tok = model::load_tokenizer(r.req.dir);
  if (!tok) return "--held-out/--prompts: " + r.req.dir + " has no tokenizer to read them with";
  auto read = [](const std::string& path, std::string& into) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    into = ss.str();
    return bool(in);
  };
  std::string held_out, prompts;
  if (!g.held_out.empty() && !read(g.held_out, held_out)) return "--held-out: cannot read " + g.held_out + " on the head";
  if (!g.prompts.empty() && !read(g.prompts, prompts)) return "--prompts: cannot read " + g.prompts + " on the head";
  std::vector<std::vector<std::int32_t>> prompt_ids;
  for (const auto& line : admin::prompt_lines(prompts, std::size_t(g.max_prompts))) prompt_ids.push_back(tok->encode(line, true));
  r.quality = admin::make_quality_set(held_out.empty() ? std::vector<std::int32_t>{} : tok->encode(held_out, true), prompt_ids, g);
  if (!g.held_out.empty() && r.quality.windows.empty()) return "--held-out: " + g.held_out + " has fewer than 2 tokens";
  if (!g.prompts.empty() && r.quality.prompts.empty()) return "--prompts: " + g.prompts + " has no prompt (one per line)";
  return std::nullopt;
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
    refresh(self, [=] { check_quality(self, run); });
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
  const bool quality_pending = !run->quality.empty() && run->quality_passed != run->step;
  const auto d = admin::decide(run->req, run->step, owner_clock_s() - run->step_since, admin::breach(canary, baseline, run->req.gate),
                               quality_pending);
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
  if (!st.cfg.topo.pool_named(r.pool)) return "no pool named '" + r.pool + "'";
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
  run->args = args;
  if (auto why = unstartable(self, run->req)) return refuse(self, token, "rollout: " + *why);
  if (auto why = load_quality(*run)) return refuse(self, token, "rollout: " + *why);
  run->model = self->state.cfg.topo.pool_named(run->req.pool)->model;  // unstartable checked it is there
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


// A head that has said nothing for this long has lost its rollouts to whichever head reads
// their records first (a restarted head takes its own back at once).
double takeover_after_s(const admin_state& st) { return std::max(5.0, 5 * std::chrono::duration<double>(st.cfg.sample_interval).count()); }

// The run a record describes, or why it cannot be run here.
std::variant<run_ptr, std::string> run_from(const admin::rollout_record& rec) {
  auto parsed = admin::parse_rollout(rec.args);
  if (auto* bad = std::get_if<std::string>(&parsed)) return *bad;
  auto run = std::make_shared<rollout_run>();
  run->req = std::get<admin::rollout_request>(parsed);
  run->args = rec.args;
  run->model = rec.model;
  run->key = rec.key;
  run->baseline = {rec.pool, rec.baseline_dir, rec.baseline_revision};
  run->phase = rec.phase;
  run->step = std::min(rec.step, run->req.steps.empty() ? 0 : run->req.steps.size() - 1);
  run->serving_before = rec.serving_before;
  run->decisions = rec.decisions;
  return run;
}

// Runs a rollout under way from where its record left it: the split back in this head's
// router, then what its phase was doing (judging, promoting, rolling back), done again.
void take_over(admin_ptr self, const admin::rollout_record& rec) {
  auto& st = self->state;
  auto made = run_from(rec);
  if (auto* bad = std::get_if<std::string>(&made))
    return emit(self, "rollout", {{"pool", rec.pool}, {"decision", "not_taken_over"}, {"reason", "its record does not parse: " + *bad}});
  const run_ptr run = std::get<run_ptr>(made);
  st.rollouts[rec.pool] = run;
  st.followed.erase(rec.pool);
  if (!rec.baseline_dir.empty()) st.pool_revisions[rec.pool] = {rec.baseline_dir, rec.baseline_revision};
  const double silent = unix_seconds() - rec.updated_at;
  record(self, *run, "taken_over",
         (st.cfg.head.empty() ? std::string("this head") : "head " + st.cfg.head) + " took it over from " +
             (rec.owner == st.cfg.head ? std::string("its previous process") : "head " + rec.owner) + ", whose last record was " +
             std::to_string(int(std::lround(silent))) + " s old");
  using admin::rollout_phase;
  if (run->phase == rollout_phase::promoting) return promote(self, run, "resuming the promotion after a takeover");
  if (run->phase == rollout_phase::rolling_back) return roll_back(self, run, "resuming the roll-back after a takeover");
  self->send(st.cfg.router, canary_atom::value, run->model, run->key, rec.share);
  run->step_since = owner_clock_s() - rec.held_s;  // the step goes on where it was
  if (auto why = load_quality(*run)) return roll_back(self, run, "taken over, but the quality gate cannot run here: " + *why);
  if (run->phase == rollout_phase::canary) refresh(self, [=] { check_quality(self, run); });
}

// What the nodes' records say to this head: take over, follow another head's split, or end a
// split it followed.
void follow_records(admin_ptr self, const std::vector<std::string>& texts) {
  auto& st = self->state;
  for (const auto& rec : admin::newest_per_pool(texts)) {
    auto it = st.rollouts.find(rec.pool);
    const bool running = it != st.rollouts.end() && active(*it->second);
    const auto* pool = st.cfg.topo.pool_named(rec.pool);
    if (!pool || pool->model != rec.model) continue;
    switch (admin::act_on(rec, st.cfg.head, st.start_ns, running, unix_seconds(), takeover_after_s(st))) {
      case admin::record_action::take_over: take_over(self, rec); break;
      case admin::record_action::follow: {
        const std::pair<std::string, double> split{rec.key, rec.share};
        if (st.followed[rec.pool] != split) self->send(st.cfg.router, canary_atom::value, rec.model, rec.key, rec.share);
        st.followed[rec.pool] = split;
        break;
      }
      case admin::record_action::end_split:
        if (st.followed.erase(rec.pool)) self->send(st.cfg.router, canary_atom::value, rec.model, rec.key, 0.0);
        break;
      case admin::record_action::ignore: break;
    }
  }
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
  auto& st = self->state;
  if (st.cfg.registry)  // what other heads (or this head's previous process) left with the nodes
    self->request(st.cfg.registry, st.cfg.timeout, rollout_record_atom::value)
        .then([=](const std::vector<std::string>& texts) { follow_records(self, texts); }, [](caf::error&) {});
  for (const auto& [pool, run] : st.rollouts) {
    if (active(*run)) publish_record(self, *run);  // the owner's heartbeat
    if (run->phase != admin::rollout_phase::canary || run->busy) continue;
    self->request(self->state.cfg.owner, self->state.cfg.timeout, figures_atom::value, run->step_since)
        .then([=](const std::vector<replica_figures>& f) { judge(self, run, f); }, [](caf::error&) {});
  }
}

}  // namespace admin_ops

}  // namespace troupe::actors
