// Where a step's forward runs. The engine schedules and turns tokens into outputs; an executor
// owns the KV tensors, runs the model over a plan and chooses the tokens of its logit rows
// (sampling happens where the logits are). Three live behind this interface: the CPU executor
// (in-process model and cache), the sim executor (the cost model's time, no arithmetic) and the
// worker group (ranks in actors, actors/group_executor.h). The engine has no other mode.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "runtime/engine/forward_plan.h"
#include "runtime/sampling/sample_rows.h"

namespace troupe::engine {

struct step_result {
  std::vector<sampling::sampled_token> tokens;  // one per plan.logit_rows, in order
  double seconds = 0;                           // the forward's time (sim: the cost model's)
};

class executor {
 public:
  virtual ~executor() = default;

  // Runs `plan` and calls `done` exactly once, at once or later (from the same thread that
  // drives the engine): with the result, or with nothing if the step failed, in which case
  // the KV tensors are lost and every running sequence is recomputed.
  using step_done = std::function<void(std::optional<step_result>)>;
  virtual void execute(forward_plan plan, step_done done) = 0;

  // The KV of a sequence's first `positions` tokens whose blocks are `table`, every layer, as
  // f32 in kv::kv_cache::export_kv's layout; calls `done` with it, or with nothing if the
  // executor holds no KV (sim) or the export failed (the receiver then recomputes).
  using kv_done = std::function<void(std::vector<float>)>;
  virtual void export_kv(std::vector<std::int32_t> table, int positions, kv_done done) = 0;
};

}  // namespace troupe::engine
