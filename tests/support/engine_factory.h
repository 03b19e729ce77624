// Factories for engine tests: request sets and engine configurations.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/model/llama_model.h"

namespace troupe::test {

// `n` requests with prompt lengths spread over [3, 3 + spread) and 8..16 output tokens each.
// Seeded sampling (temperature 0.8, top-k 50, top-p 0.95, seed = index) unless greedy.
inline std::vector<engine::request> mixed_requests(int n, int vocab, bool greedy, int spread = 200) {
  std::vector<engine::request> out;
  for (int i = 0; i < n; ++i) {
    engine::request r;
    r.id = "req-" + std::to_string(i);
    const int len = 3 + (i * 37) % spread;
    for (int p = 0; p < len; ++p) r.prompt.push_back((i * 1009 + p * 7919 + 17) % vocab);
    r.params.max_tokens = 8 + i % 9;
    r.params.ignore_eos = true;
    if (greedy) {
      r.params.temperature = 0;
    } else {
      r.params.temperature = 0.8f;
      r.params.top_k = 50;
      r.params.top_p = 0.95f;
      r.params.seed = std::uint64_t(i);
    }
    out.push_back(std::move(r));
  }
  return out;
}

inline engine::engine_config engine_cfg(int chunk, int budget, int num_blocks = 0) {
  engine::engine_config c;
  c.sched.long_prefill_chunk = chunk;
  c.sched.max_num_batched_tokens = budget;
  c.num_blocks = num_blocks;
  return c;
}

}  // namespace troupe::test
