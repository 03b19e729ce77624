// `swap POOL --model DIR [--revision R]`: a pool's model replaced by another revision under load,
// replica by replica, with no failed request (docs/admin.md). The nodes hosting the pool load
// the revision first (a load error ends the swap before anything moved); then each replica of
// another revision is replaced as runtime/admin/swap_plan.h decides: a new one serves, then the
// old one drains (its requests move on; KV of another revision cannot be pulled, so the replica
// that takes one recomputes it) and stops. At the end the router hashes the model's prompts under
// the new key, so KV-aware placement finds the new replicas' blocks.
#include "actors/control/admin_ops.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "actors/protocol/error_text.h"
#include "actors/protocol/node_protocol.h"
#include "runtime/admin/swap_plan.h"
#include "runtime/common/log.h"

namespace troupe::actors::admin_ops {

namespace {

// A load may take minutes on a large model (the registry's own bound is 10 minutes).
constexpr auto swap_load_timeout = std::chrono::minutes(11);

struct swap_job {
  admin::swap_request req;
  std::string model;  // the pool's model ("" : [model])
  std::string key;    // the revision's cache key, from the nodes
  int want = -1;      // serving replicas wanted on it (a canary's); negative: all
  swap_done done;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  nlohmann::json replaced = nlohmann::json::array();  // {"old", "new"} per move
  int moves_left = 0;  // each replica moves once, with room for restarts meanwhile
};
using job_ptr = std::shared_ptr<swap_job>;

nlohmann::json swap_fields(const swap_job& job, const std::string& phase) {
  return {{"pool", job.req.pool}, {"phase", phase}, {"model", job.req.dir}, {"revision", job.req.revision}, {"model_key", job.key}};
}

void finish(admin_ptr self, const job_ptr& job, const std::optional<std::string>& error) {
  self->state.swapping.erase(job->req.pool);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - job->started).count();
  auto fields = swap_fields(*job, error ? "failed" : "done");
  fields["replaced"] = job->replaced;
  fields["seconds"] = seconds;
  if (error) {
    fields["error"] = *error;
    emit(self, "swap", fields);
    return job->done(*error + " (replicas replaced before it: " + std::to_string(job->replaced.size()) + "; a second swap goes on from there)",
                     fields);
  }
  if (job->want < 0) {  // every replica runs it now
    self->send(self->state.cfg.router, model_key_atom::value, job->model, job->key);
    self->state.pool_revisions[job->req.pool] = {job->req.dir, job->req.revision};
  }
  emit(self, "swap", fields);
  fields.erase("phase");
  job->done(std::nullopt, std::move(fields));
}

std::string name_of(admin_ptr self, std::size_t i) { return self->state.replicas[i].name; }

// Drains replica `old` (its requests move on) and stops it; guarded meanwhile (guard_drains).
void retire(admin_ptr self, std::size_t old, step_done then) {
  self->state.guarded_drains[old] = self->state.replicas[old].pool;
  drain(self, old, [=](std::optional<std::string> error) {
    self->state.guarded_drains.erase(old);
    if (error) return then("draining " + name_of(self, old) + ": " + *error);
    stop_replica(self, old, then);
  });
}

// Starts slot `i` (its node agent has the new revision) and places on it unless it is to wait warm.
void start_new(admin_ptr self, std::size_t i, bool serve, step_done then) {
  start_replicas(self, {i}, [=](std::optional<std::string> error) {
    if (error) return then(error);
    if (!self->state.schedulers[i]) return then(name_of(self, i) + " did not register after it started");
    if (serve) unpark(self, i);
    then(std::nullopt);
  });
}

void next_move(admin_ptr self, job_ptr job);

void moved(admin_ptr self, const job_ptr& job, const std::string& from, const std::string& to, const std::optional<std::string>& error) {
  if (error) return finish(self, job, error);
  job->replaced.push_back({{"old", from}, {"new", to}});
  auto fields = swap_fields(*job, "replaced");
  fields["old"] = from;
  fields["new"] = to;
  emit(self, "swap", std::move(fields));
  next_move(self, job);
}

// Carries out one step of the plan, then looks again.
void take_step(admin_ptr self, const job_ptr& job, const admin::swap_step& step) {
  using kind = admin::swap_step::kind;
  const std::size_t old = step.old_replica;
  const std::string old_name = name_of(self, old);
  if (step.what == kind::add_spare) {
    const std::string spare_name = name_of(self, step.spare);
    return start_new(self, step.spare, true, [=](std::optional<std::string> e) { moved(self, job, "", spare_name, e); });
  }
  if (step.what == kind::replace_via_spare) {
    const std::string spare_name = name_of(self, step.spare);
    return start_new(self, step.spare, true, [=](std::optional<std::string> e) {
      if (e) return moved(self, job, old_name, spare_name, e);
      retire(self, old, [=](std::optional<std::string> e) { moved(self, job, old_name, spare_name, e); });
    });
  }
  if (step.what == kind::replace_in_place)
    return retire(self, old, [=](std::optional<std::string> e) {
      if (e) return moved(self, job, old_name, old_name, e);
      start_new(self, old, true, [=](std::optional<std::string> e) { moved(self, job, old_name, old_name, e); });
    });
  // restart_warm: nothing runs there
  stop_replica(self, old, [=](std::optional<std::string> e) {
    if (e) return moved(self, job, old_name, old_name, e);
    start_new(self, old, false, [=](std::optional<std::string> e) { moved(self, job, old_name, old_name, e); });
  });
}

void next_move(admin_ptr self, job_ptr job) {
  refresh(self, [=] {
    const auto step = admin::next_swap_step(self->state.replicas, job->req.pool, job->key, job->want);
    if (step.what == admin::swap_step::kind::done) return finish(self, job, std::nullopt);
    if (step.what == admin::swap_step::kind::refuse) return finish(self, job, step.why);
    if (--job->moves_left < 0) return finish(self, job, "no progress: replicas still run another revision after being replaced");
    take_step(self, job, step);
  });
}

// Why the pool named by the request cannot be swapped, or nothing.
std::optional<std::string> unswappable(admin_ptr self, const admin::swap_request& r) {
  const auto& st = self->state;
  const auto* pool = st.cfg.topo.pool_named(r.pool);
  if (!pool) return "no pool named '" + r.pool + "'";
  if (!st.cfg.registry) return std::string("this head has no node registry to load the revision through");
  if (st.cfg.lora.catalog) return std::string("the topology serves LoRA adapters ([lora]), trained for the weights it runs now");
  if (pool->role != topology::pool_role::both)
    return "pool " + r.pool + " is one side of disaggregated serving (role " + topology::role_name(pool->role) +
           "); swapping one side alone is not supported";
  if (st.swapping.count(r.pool)) return "pool " + r.pool + " is being swapped already";
  return std::nullopt;
}

}  // namespace

void guard_drains(admin_ptr self) {
  auto& st = self->state;
  std::vector<std::size_t> draining;
  for (const auto& [i, pool] : st.guarded_drains) draining.push_back(i);
  for (auto i : admin::drains_to_undo(st.replicas, draining)) {
    log::warn("swap_drain_undone", {{"replica", st.replicas[i].name}, {"pool", st.replicas[i].pool}, {"why", "no other replica of the pool serves"}});
    self->send(st.cfg.router, resume_atom::value, replica_id{st.replicas[i].id});
    if (st.schedulers[i]) self->send(st.schedulers[i], resume_atom::value);
  }
}

void swap_pool(admin_ptr self, const admin::swap_request& req, int want, swap_done done) {
  auto job = std::make_shared<swap_job>();
  job->req = req;
  job->want = want;
  job->done = std::move(done);
  if (auto why = unswappable(self, job->req)) return job->done(*why, nullptr);
  auto& st = self->state;
  job->model = st.cfg.topo.pool_named(job->req.pool)->model;  // unswappable checked it is there
  for (const auto& r : st.replicas) job->moves_left += r.pool == job->req.pool ? 3 : 0;
  st.swapping.insert(job->req.pool);
  const revision_spec spec{job->req.pool, job->model, job->req.dir, job->req.revision, {}};
  self->request(st.cfg.registry, swap_load_timeout, revision_atom::value, spec)
      .then(
          [=](const std::string& key) {
            job->key = key;
            emit(self, "swap", swap_fields(*job, "loaded"));
            next_move(self, job);
          },
          [=](caf::error& e) {
            finish(self, job, "loading " + (job->req.dir.empty() ? std::string("the model it was started with") : job->req.dir) + ": " +
                                  error_message(self->system(), e));
          });
}

void cmd_swap(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args) {
  auto parsed = admin::parse_swap(args);
  if (auto* bad = std::get_if<std::string>(&parsed)) return refuse(self, token, "swap: " + *bad);
  const auto req = std::get<admin::swap_request>(parsed);
  if (self->state.rollouts.count(req.pool)) return refuse(self, token, "swap: pool " + req.pool + " is in a rollout (rollout status)");
  emit(self, "admin", {{"command", cmd}, {"pool", req.pool}, {"model", req.dir}, {"revision", req.revision}});
  swap_pool(self, req, -1, [=](std::optional<std::string> error, nlohmann::json result) {
    if (error) return refuse(self, token, "swap " + req.pool + ": " + *error);
    answer(self, token, std::move(result));
  });
}

}  // namespace troupe::actors::admin_ops
