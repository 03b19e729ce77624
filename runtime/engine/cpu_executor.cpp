#include "runtime/engine/cpu_executor.h"

#include <chrono>

namespace troupe::engine {

cpu_executor::cpu_executor(std::shared_ptr<const model::llama_model> model, kv::kv_cache_config cache)
    : model_(std::move(model)) {
  const auto& mc = model_->config();
  cache_ = std::make_unique<kv::kv_cache>(cache, mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim);
}

void cpu_executor::execute(forward_plan plan, step_done done) {
  const auto& mc = model_->config();
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& imp : plan.imports)
    cache_->import_kv(plan.tables[std::size_t(imp.seq)].data(), imp.positions, imp.data.data());
  logits_.resize(plan.logit_rows.size() * std::size_t(mc.vocab_size));
  model_->forward(view(plan), *cache_, logits_.data(), ws_);
  step_result r;
  r.tokens = sampling::sample_rows(logits_, plan.sampling, mc.vocab_size, mc.eos_token_ids);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done(std::move(r));
}

void cpu_executor::export_kv(std::vector<std::int32_t> table, int positions, kv_done done) {
  std::vector<float> out(cache_->kv_floats(positions));
  cache_->export_kv(table.data(), positions, out.data());
  done(std::move(out));
}

}  // namespace troupe::engine
