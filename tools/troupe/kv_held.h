// What `troupe bench engine` reports of KV memory: the bytes one sequence holds per position at
// a long context, with the windowed layers' pages freed out of the window (kv/window_groups.h)
// and with every position kept, as the engine's block manager accounts them.
#pragma once
#include <nlohmann/json.hpp>

#include "kernels/cpu/dtype.h"
#include "runtime/model/model_config.h"

namespace troupe::cli {

// {"context", "window_pages_bytes_per_token", "every_position_bytes_per_token", "ratio"}, or
// null for a model without both windowed and global layers.
nlohmann::json kv_held_per_token(const model::model_config& shape, kernels::dtype kv_type, int context);

}  // namespace troupe::cli
