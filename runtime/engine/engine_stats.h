// An engine's counters since it started: what its replica reports (actors/protocol's
// load_report carries them as they are) and the benchmarks read.
#pragma once
#include <cstdint>
#include <vector>

namespace troupe::engine {

struct engine_stats {
  std::uint64_t steps = 0;
  double forward_seconds = 0;       // in the model's forward pass (sim: the cost model's time)
  double last_forward_seconds = 0;  // of the latest step
  std::uint64_t prompt_tokens_computed = 0;   // includes recomputation after preemption
  std::uint64_t generated_tokens = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t kv_losses = 0;              // steps whose KV was lost (the executor failed)
  std::uint64_t recomputed_after_loss = 0;  // sequences sent back to recompute by them
  // Steps a waiting sequence sat out because a running prefill was computing its next block.
  std::uint64_t prefix_waits = 0;
  // KV pulled from other replicas (request::kv_from): pulls done, failed, bytes, seconds.
  std::uint64_t kv_pulls = 0, kv_pull_failures = 0, kv_pull_bytes = 0;
  double kv_pull_seconds = 0;
  std::vector<std::uint64_t> expert_tokens;  // mixture-of-experts models: tokens routed to each expert, all layers
  // Speculative decoding, vLLM's counters: verify steps with proposals (drafts), tokens proposed,
  // proposals accepted into the output, and those per position (index j: the (j+1)-th proposal
  // of a step). A proposal that follows the end of its request (EOS, a stop, max_tokens) is not
  // counted as accepted, so a request's output tokens = its decode steps + its accepted tokens.
  std::uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<std::uint64_t> spec_accepted_per_pos;
  double spec_propose_seconds = 0;  // in the proposer (a draft model's forward, n-gram lookups), outside forward_seconds
};

}  // namespace troupe::engine
