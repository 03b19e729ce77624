// Whether a node process serves, for an orchestrator's readiness probe (`troupe node
// --status-file`): a pure reading of what its replicas say of themselves.
#pragma once
#include <span>

namespace troupe::supervision {

// What one replica of the process is doing.
enum class replica_mode {
  serving,   // the routers place requests on it
  draining,  // admits nothing, hands what it holds to other replicas (troupe admin drain)
  parked,    // in the warm pool: alive, placed on by nobody
};

// The node's readiness word: "ready" when any replica serves, or when it holds none (a node of
// ranks, or of stopped slots, has nothing to drain or park); otherwise "draining" when any
// replica drains, else "parked".
const char* node_readiness(std::span<const replica_mode> replicas);

}  // namespace troupe::supervision
