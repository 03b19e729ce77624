#include "runtime/engine/sim_executor.h"

namespace troupe::engine {

sim_executor::sim_executor(model::model_config shape, sim::gpu_spec gpu, wait_fn wait)
    : shape_(std::move(shape)), gpu_(gpu), wait_(std::move(wait)) {}

void sim_executor::execute(forward_plan plan, step_done done) {
  sim::step_shape s{std::int64_t(plan.tokens.size()), 0, std::int64_t(plan.logit_rows.size())};
  for (auto pos : plan.positions) s.context_reads += pos + 1;
  step_result r;
  r.seconds = sim::step_seconds(shape_, gpu_, s);
  for (const auto& row : plan.sampling) r.tokens.push_back({sampling::sim_token(row, shape_.vocab_size, shape_.eos_token_ids), {}});
  if (!wait_ || r.seconds <= 0) return done(std::move(r));
  const double secs = r.seconds;
  wait_(secs, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

void sim_executor::export_kv(std::vector<std::int32_t>, int, kv_done done) { done({}); }

}  // namespace troupe::engine
