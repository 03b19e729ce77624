// The sim backend's executor: no weights and no KV tensors. Each step computes nothing, chooses
// deterministic tokens (sampling::sim_token) and takes the cost model's time for the plan. That
// time passes through `wait`: an actor passes a delayed message, a test or a tool passes nothing
// (the step completes at once and reports the time it would have taken).
#pragma once
#include <functional>

#include "runtime/engine/executor.h"
#include "runtime/model/model_config.h"
#include "runtime/sim/cost_model.h"

namespace troupe::engine {

class sim_executor final : public executor {
 public:
  // Lets `seconds` pass, then calls `then`.
  using wait_fn = std::function<void(double seconds, std::function<void()> then)>;
  sim_executor(model::model_config shape, sim::gpu_spec gpu, wait_fn wait = {});
  void execute(forward_plan plan, step_done done) override;
  std::vector<std::pair<int, int>> kv_ranks() const override;
  std::vector<kv::transfer::kv_source> kv_sources() const override;
  void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
               kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) override;

 private:
  model::model_config shape_;
  sim::gpu_spec gpu_;
  wait_fn wait_;
};

}  // namespace troupe::engine
