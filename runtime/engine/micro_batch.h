// A step's plan cut into micro-batches for a pipeline: while stage s runs micro-batch m, stage
// s + 1 runs micro-batch m - 1, so pipeline ranks work at the same time instead of in turn.
// Cuts fall between sequences (a sequence's tokens of the step stay in one micro-batch), and the
// micro-batches hold about the same number of tokens. Each keeps the positions, in the whole
// plan's logit_rows (and pools), of its own logit rows (and pooled spans), so the tokens chosen
// (and vectors pooled) for the micro-batches go back into the step's order.
#pragma once
#include <vector>

#include "runtime/engine/forward_plan.h"

namespace troupe::engine {

struct micro_batch {
  forward_plan plan;             // self-contained: its own tokens, tables and logit rows
  std::vector<std::int32_t> rows;  // for each of plan.logit_rows: its index in the whole plan's
  std::vector<std::int32_t> pools;  // for each of plan.pools: its index in the whole plan's
};

// At most `parts` micro-batches (fewer when the plan has fewer sequences), none empty; a plan
// cut into 1 is the plan itself, moved (the common case: no copy a step).
std::vector<micro_batch> split_plan(forward_plan plan, int parts);

}  // namespace troupe::engine
