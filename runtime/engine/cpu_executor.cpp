#include "runtime/engine/cpu_executor.h"

#include <chrono>

#include "runtime/kv/transfer/pull.h"
#include "runtime/kv/transfer/registry.h"

namespace troupe::engine {

cpu_executor::cpu_executor(std::shared_ptr<const model::llama_model> model, kv::kv_cache_config cache)
    : model_(std::move(model)) {
  const auto& mc = model_->config();
  cache_ = std::make_shared<kv::kv_cache>(cache, mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim);
  source_ = kv::transfer::registry::global().expose(cache_);
}

cpu_executor::~cpu_executor() { kv::transfer::registry::global().withdraw(source_.key); }

void cpu_executor::execute(forward_plan plan, step_done done) {
  const auto& mc = model_->config();
  const auto t0 = std::chrono::steady_clock::now();
  logits_.resize(plan.logit_rows.size() * std::size_t(mc.vocab_size));
  model_->forward(view(plan), *cache_, logits_.data(), ws_);
  step_result r;
  r.tokens = sampling::sample_rows(logits_, plan.sampling, mc.vocab_size, mc.eos_token_ids);
  r.pooled = model_->pool(ws_, plan.pools);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.expert_tokens = std::move(ws_.expert_tokens);
  ws_.expert_tokens.clear();
  done(std::move(r));
}

std::vector<kv::transfer::kv_source> cpu_executor::kv_sources() const {
  return {kv::transfer::registry::global().with_tcp(source_)};
}

std::vector<std::pair<int, int>> cpu_executor::kv_ranks() const { return {{0, model_->num_layers()}}; }

void cpu_executor::pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
                           kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) {
  pull_outcome out;
  try {
    auto r = kv::transfer::pull(from, {cache_.get(), 0, std::move(mine), table}, how, deadline);
    out.bytes = r.bytes;
  } catch (const kv::transfer::transfer_error& e) {
    out.error = e.what();
  }
  done(std::move(out));
}

}  // namespace troupe::engine
