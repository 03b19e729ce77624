#include "runtime/supervision/readiness.h"

#include <algorithm>

namespace troupe::supervision {

const char* node_readiness(std::span<const replica_mode> replicas) {
  auto any = [&](replica_mode m) { return std::find(replicas.begin(), replicas.end(), m) != replicas.end(); };
  if (replicas.empty() || any(replica_mode::serving)) return "ready";
  return any(replica_mode::draining) ? "draining" : "parked";
}

}  // namespace troupe::supervision
