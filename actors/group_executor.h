// The engine's executor for a replica whose ranks are actors (worker_group.h): a step goes to
// the group supervisor as a message and its tokens come back as the reply. A failed or hung
// step has lost the ranks' KV: the group is made whole again (restarted if hung) before the
// engine hears of the failure, so the recompute runs on fresh ranks. If the group cannot be
// made whole, the owning actor ends.
#pragma once
#include <chrono>

#include "actors/protocol/worker_protocol.h"
#include "runtime/engine/executor.h"

namespace troupe::actors {

// `Self` is the actor that owns the engine (its replies run there); it outlives this object.
template <class Self>
class group_executor final : public engine::executor {
 public:
  group_executor(Self self, group_actor group, std::chrono::milliseconds step_timeout)
      : self_(self), group_(std::move(group)), timeout_(step_timeout) {}

  void execute(engine::forward_plan plan, step_done done) override {
    auto self = self_;
    auto group = group_;
    auto timeout = timeout_;
    self->request(group, timeout, execute_atom::value, stage_input{std::move(plan), {}, 0})
        .then([done](engine::step_result& r) { done(std::move(r)); },
              [self, group, timeout, done](caf::error& err) {
                auto resume = [done](group_status) { done(std::nullopt); };
                auto give_up = [self](caf::error& e) { self->quit(e); };
                if (err == caf::sec::request_timeout)  // a rank may be hung: replace them all
                  self->request(group, timeout, restart_atom::value).then(resume, give_up);
                else  // a rank died: wait until the supervisor has restarted the group
                  self->request(group, timeout, ready_atom::value).then(resume, give_up);
              });
  }

  void export_kv(std::vector<std::int32_t> table, int positions, kv_done done) override {
    self_->request(group_, timeout_, export_atom::value, kv_export{std::move(table), positions, {}})
        .then([done](std::vector<float>& kv) { done(std::move(kv)); },
              [done](caf::error&) { done({}); });  // no KV: the receiver recomputes it
  }

 private:
  Self self_;
  group_actor group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace troupe::actors
