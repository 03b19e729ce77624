// The in-process executor: the model's forward on this process's CPU threads, over a KV cache
// this object owns, then the logit rows sampled here. Its cache is exposed for pulls
// (runtime/kv/transfer) while it lives; its own pulls copy at once.
#pragma once
#include <memory>

#include "runtime/engine/executor.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/llama_model.h"

namespace troupe::engine {

class cpu_executor final : public executor {
 public:
  cpu_executor(std::shared_ptr<const model::llama_model> model, kv::kv_cache_config cache);
  ~cpu_executor() override;
  void execute(forward_plan plan, step_done done) override;
  bool runs_adapters() const override { return true; }
  std::vector<std::pair<int, int>> kv_ranks() const override;
  std::vector<kv::transfer::kv_source> kv_sources() const override;
  void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
               kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) override;

 private:
  std::shared_ptr<const model::llama_model> model_;
  std::shared_ptr<kv::kv_cache> cache_;
  kv::transfer::kv_source source_;
  model::forward_workspace ws_;
  std::vector<float> logits_;
};

}  // namespace troupe::engine
