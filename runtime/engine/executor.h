// Where a step's forward runs. The engine schedules and turns tokens into outputs; an executor
// owns the KV tensors, runs the model over a plan and chooses the tokens of its logit rows
// (sampling happens where the logits are). Three live behind this interface: the CPU executor
// (in-process model and cache), the sim executor (the cost model's time, no arithmetic) and the
// worker group (ranks in actors, actors/serving/group_executor.h). The engine has no other mode.
//
// KV moves between replicas by pull (runtime/kv/transfer): the executor that computed a
// sequence's KV exposes its caches (kv_sources), and the receiving executor copies the blocks
// straight into blocks its engine reserved (pull_kv).
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine/forward_plan.h"
#include "runtime/kv/transfer/kv_handle.h"
#include "runtime/sampling/sample_rows.h"

namespace troupe::engine {

struct step_result {
  std::vector<sampling::sampled_token> tokens;  // one per plan.logit_rows, in order
  double seconds = 0;                           // the forward's time (sim: the cost model's)
  std::vector<std::uint64_t> expert_tokens;     // mixture-of-experts models: tokens routed to each expert (all layers)
  std::vector<std::vector<float>> pooled;       // one per plan.pools: llama_model::pool's sums (sim: zeros)
};

// How a pull ended: bytes copied, or why it failed (the engine then releases the blocks).
struct pull_outcome {
  std::string error;  // empty: the blocks hold the KV now
  std::size_t bytes = 0;
};

class executor {
 public:
  virtual ~executor() = default;

  // Runs `plan` and calls `done` exactly once, at once or later (from the same thread that
  // drives the engine): with the result, or with nothing if the step failed, in which case
  // the KV tensors are lost and every running sequence is recomputed.
  using step_done = std::function<void(std::optional<step_result>)>;
  virtual void execute(forward_plan plan, step_done done) = 0;

  // Whether plans may carry LoRA adapters (forward_plan::adapters): only where one rank in this
  // process holds the whole model.
  virtual bool runs_adapters() const { return false; }

  // The model layers [first, last) each pipeline stage's caches hold, in order.
  virtual std::vector<std::pair<int, int>> kv_ranks() const = 0;
  // Over how many tensor ranks each stage's KV heads are split (kv_layout::tensor_parallel).
  virtual int tensor_parallel() const { return 1; }
  // Where another replica can pull each rank's cache from now: one per kv_ranks entry and
  // tensor rank, stage by stage.
  virtual std::vector<kv::transfer::kv_source> kv_sources() const = 0;

  // Copies the blocks of `from` into this executor's blocks `table` (reserved by the engine,
  // untouched by any step until `done`), for every rank; `mine` is this replica's layout.
  // Calls `done` exactly once, from the thread that drives the engine.
  using pull_done = std::function<void(pull_outcome)>;
  virtual void pull_kv(kv::transfer::kv_handle from, kv::transfer::kv_layout mine, std::vector<std::int32_t> table,
                       kv::transfer::backend how, std::chrono::steady_clock::time_point deadline, pull_done done) = 0;
};

}  // namespace troupe::engine
