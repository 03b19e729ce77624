// kv_aware's cost of placing a request on one replica (routing::kv_aware in policy.h picks the
// lowest), on its own so that a caller can bound it: the cluster simulator skips asking a
// replica's cache how much of a prompt it holds when even holding all of it could not make that
// replica win. Defined in policy.cpp, beside the policy.
#pragma once
#include <map>
#include <string>

namespace troupe::routing {

struct route_request;
struct replica_load;

struct kv_aware_weights {
  double prefix = 1.0, token = 1.0 / 256, running = 1.0, usage = 0.0;
  // From a topology's [router.params] (policy_params): defaults for the parameters not given.
  static kv_aware_weights of(const std::map<std::string, double>& params);
  // token * (waiting + prompt - prefix * cached tokens) + running * running_seqs + usage * KV use.
  double cost(const route_request& r, const replica_load& x) const;
};

}  // namespace troupe::routing
