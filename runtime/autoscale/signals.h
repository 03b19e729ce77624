// The autoscaler's view of each pool, from what the admin actor knows: the replicas' states and
// last loads, the pools' bounds, and the request owner's recent latencies. Pure, so the policy's
// inputs are tested without a cluster.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "runtime/admin/cluster_status.h"
#include "runtime/admission/pool_latencies.h"
#include "runtime/autoscale/autoscale.h"

namespace troupe::autoscale {

// Serving counts replicas running or draining, warm those parked; queues, batches and KV use are summed (KV use
// averaged) over the running ones. A latency not measured within `fresh` (a pool with no
// traffic, or none finishing) is no signal: an old spike's TTFT must not hold a quiet pool up.
std::map<std::string, pool_signals> signals_of(const std::vector<admin::replica_status>& replicas,
                                               const std::vector<admin::pool_bounds>& pools,
                                               const std::vector<admission::pool_latency>& latencies, std::chrono::milliseconds fresh);

}  // namespace troupe::autoscale
