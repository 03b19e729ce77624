#include "runtime/engine/sim_executor.h"

namespace troupe::engine {

sim_executor::sim_executor(model::model_config shape, sim::gpu_spec gpu, wait_fn wait)
    : shape_(std::move(shape)), gpu_(gpu), wait_(std::move(wait)) {}

void sim_executor::execute(forward_plan plan, step_done done) {
  sim::step_shape s{std::int64_t(plan.tokens.size()), 0, std::int64_t(plan.logit_rows.size())};
  for (auto pos : plan.positions) s.context_reads += pos + 1;
  step_result r;
  r.seconds = sim::step_seconds(shape_, gpu_, s);
  r.pooled.assign(plan.pools.size(), std::vector<float>(std::size_t(shape_.hidden_size), 0.0f));  // no arithmetic
  for (const auto& row : plan.sampling) r.tokens.push_back({sampling::sim_token(row, shape_.vocab_size, shape_.eos_token_ids), {}});
  if (!wait_ || r.seconds <= 0) return done(std::move(r));
  const double secs = r.seconds;
  wait_(secs, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

std::vector<std::pair<int, int>> sim_executor::kv_ranks() const { return {{0, shape_.num_hidden_layers}}; }

std::vector<kv::transfer::kv_source> sim_executor::kv_sources() const {
  kv::transfer::kv_source s;
  s.key = "sim";  // nothing to read: a sim pull moves no bytes
  return {s};
}

void sim_executor::pull_kv(kv::transfer::kv_handle, kv::transfer::kv_layout, std::vector<std::int32_t>,
                           kv::transfer::backend, std::chrono::steady_clock::time_point, pull_done done) {
  done({});  // no KV tensors: the blocks count as filled at once (the transfer's time is not modelled)
}

}  // namespace troupe::engine
