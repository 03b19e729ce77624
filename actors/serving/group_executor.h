// The engine's executor for a replica whose ranks are actors (worker_group.h): a step goes to
// the group supervisor as a message and its tokens come back as the reply. A failed or hung
// step has lost the ranks' KV: the group is made whole again (restarted if hung) before the
// engine hears of the failure, so the recompute runs on fresh ranks. If the group cannot be
// made whole, the owning actor ends.
#pragma once
#include <chrono>
#include <functional>

#include "actors/protocol/worker_protocol.h"
#include "actors/serving/worker_group.h"
#include "runtime/kv/transfer/registry.h"
#include "runtime/engine/executor.h"

namespace troupe::actors {

// `Self` is the actor that owns the engine (its replies run there); it outlives this object.
template <class Self>
class group_executor final : public engine::executor {
 public:
  // `step_timeout` is the group's: the supervisor fails a step past it itself and restarts the
  // group, so this side waits a little longer and restarts the group only if the supervisor
  // itself does not answer.
  group_executor(Self self, group_actor group, std::chrono::milliseconds step_timeout, int layers, int ranks, int tensor_ranks = 1)
      : self_(self), group_(std::move(group)), timeout_(step_timeout + std::chrono::seconds(10)), layers_(layers), ranks_(ranks),
        tensor_ranks_(tensor_ranks) {}

  void execute(engine::forward_plan plan, step_done done) override {
    auto self = self_;
    auto group = group_;
    auto timeout = timeout_;
    self->request(group, timeout, execute_atom::value, stage_input{std::move(plan), {}})
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

  // One rank holding the whole model, in this process (the topology keeps adapters off groups
  // whose ranks run elsewhere: forward_plan::adapters is not serialized).
  bool runs_adapters() const override { return ranks_ == 1 && tensor_ranks_ == 1; }

  std::vector<std::pair<int, int>> kv_ranks() const override {
    std::vector<std::pair<int, int>> r;
    for (int i = 0; i < ranks_; ++i) r.push_back(rank_layers(layers_, i, ranks_));
    return r;
  }
  int tensor_parallel() const override { return tensor_ranks_; }
  std::vector<kv::transfer::kv_source> kv_sources() const override {
    std::vector<kv::transfer::kv_source> out;
    for (const auto& s : sources_) out.push_back(kv::transfer::registry::global().with_tcp(s));
    return out;
  }
  // The group's caches of its current generation (the supervisor says at every start).
  void set_sources(std::vector<kv::transfer::kv_source> s) { sources_ = std::move(s); }

  void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
               kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) override {
    auto self = self_;
    auto group = group_;
    const std::string id = from.request;
    auto go = [=, from = std::move(from), mine = std::move(mine), table = std::move(table)](bool held) mutable {
      if (!held) return done({"the sender no longer holds its KV", 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      kv_pull x{std::move(from), std::move(mine), std::move(table), how, std::max<std::int64_t>(1, left.count())};
      self->request(group, left + std::chrono::seconds(10), pull_atom::value, std::move(x))
          .then([done](std::uint64_t bytes) { done({"", std::size_t(bytes)}); },
                [self, done](caf::error& e) { done({self->system().render(e), 0}); });
    };
    if (claim_) return claim_(id, std::move(go));
    go(true);
  }
  // Asks the sender to keep the KV of request `id` while it is pulled; the continuation gets
  // whether it still holds it. Without one, pulls go ahead unasked.
  using claim_fn = std::function<void(const std::string& id, std::function<void(bool)> then)>;
  void set_claim(claim_fn f) { claim_ = std::move(f); }

 private:
  Self self_;
  group_actor group_;
  std::chrono::milliseconds timeout_;
  int layers_, ranks_, tensor_ranks_;
  std::vector<kv::transfer::kv_source> sources_;
  claim_fn claim_;
};

}  // namespace troupe::actors
