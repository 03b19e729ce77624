// kv_aware's cost of placing a request on one replica (routing::kv_aware picks the lowest), on
// its own so that a caller can bound it: the cluster simulator skips asking a replica's cache
// how much of a prompt it holds when even holding all of it could not make that replica win.
#pragma once
#include "runtime/routing/policy.h"

namespace troupe::routing {

struct kv_aware_weights {
  double prefix = 1.0, token = 1.0 / 256, running = 1.0, usage = 0.0;
  static kv_aware_weights of(const policy_params& p);  // defaults for the parameters not given
  // token * (waiting + prompt - prefix * cached tokens) + running * running_seqs + usage * KV use.
  double cost(const route_request& r, const replica_load& x) const;
};

}  // namespace troupe::routing
