// The in-process executor: the model's forward on this process's CPU threads, over a KV cache
// this object owns, then the logit rows sampled here.
#pragma once
#include <memory>

#include "runtime/engine/executor.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/llama_model.h"

namespace troupe::engine {

class cpu_executor final : public executor {
 public:
  cpu_executor(std::shared_ptr<const model::llama_model> model, kv::kv_cache_config cache);
  void execute(forward_plan plan, step_done done) override;
  void export_kv(std::vector<std::int32_t> table, int positions, kv_done done) override;

 private:
  std::shared_ptr<const model::llama_model> model_;
  std::unique_ptr<kv::kv_cache> cache_;
  model::forward_workspace ws_;
  std::vector<float> logits_;
};

}  // namespace troupe::engine
