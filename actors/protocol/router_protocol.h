// Asking the router where a request should run. The router decides; it does not forward.
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>

#include "actors/protocol/engine_protocol.h"

namespace troupe::actors {

struct route_query {
  std::string request;
  std::int32_t prompt_tokens = 0;
  std::int32_t priority = 0;
  std::uint32_t avoid = UINT32_MAX;  // a replica not to pick (the one a request just left)
  bool decode = false;  // a request handed off after its prefill: decode-capable replicas only
};

struct route_reply {
  bool placed = false;
  std::uint32_t replica = 0;
  scheduler_actor scheduler;  // valid when placed
  std::string why;            // the policy's reason, or why nothing could be placed
  bool prefill_only = false;  // placed on a prefill replica: it hands the request off after its first token
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_query& x) {
  return f(caf::meta::type_name("route_query"), x.request, x.prompt_tokens, x.priority, x.avoid, x.decode);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_reply& x) {
  return f(caf::meta::type_name("route_reply"), x.placed, x.replica, x.scheduler, x.why, x.prefill_only);
}

using route_atom = caf::atom_constant<caf::atom("route")>;
using replica_atom = caf::atom_constant<caf::atom("replica")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
using live_atom = caf::atom_constant<caf::atom("live")>;
using timing_atom = caf::atom_constant<caf::atom("timing")>;
using replicas_atom = caf::atom_constant<caf::atom("replicas")>;

using router_actor = caf::typed_actor<
    // Pick a live replica for a request (placed == false when none can take it).
    caf::replies_to<route_atom, route_query>::with<route_reply>,
    // A replica joins (or comes back under a new handle). The router monitors it and stops
    // placing on it the moment it goes down. Replies once the replica can be placed on.
    caf::replies_to<replica_atom, std::uint32_t, scheduler_actor>::with<bool>,
    // How many replicas can be placed on now.
    caf::replies_to<live_atom>::with<std::uint32_t>,
    // The live replicas' schedulers, wherever they run (for load queries and tools).
    caf::replies_to<replicas_atom>::with<std::vector<scheduler_actor>>,
    // The time each routing decision took, in nanoseconds, oldest first (the last 100,000).
    caf::replies_to<timing_atom>::with<std::vector<std::int64_t>>,
    // Internal: refresh the replicas' load reports.
    caf::reacts_to<poll_atom>>;

void register_router_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
