// Talking to the request owner: the actor on the head that owns every request from submission
// to its last token, and moves it to another replica if the one serving it dies.
#pragma once
#include <caf/all.hpp>

#include <chrono>

#include "actors/protocol/admin_protocol.h"
#include "actors/protocol/engine_protocol.h"
#include "runtime/admission/replica_figures.h"

namespace troupe::admission {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_figures& x) {
  return f(caf::meta::type_name("replica_figures"), x.replica, x.ttft_s, x.itl_s, x.finished, x.failed, x.refused);
}

}  // namespace troupe::admission

namespace troupe::actors {

// One migration: the request, the replicas it left and joined, and the time from the old
// replica's death being noticed to the first token from the new one.
struct migration_event {
  std::string request;
  replica_id from, to;
  double seconds_to_first_token = 0;
  std::int64_t first_token_at_ns = 0;  // steady_clock time of that token on the head
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_event& x) {
  return f(caf::meta::type_name("migration_event"), x.request, x.from, x.to, x.seconds_to_first_token,
           x.first_token_at_ns);
}

using migrations_atom = caf::atom_constant<caf::atom("migrations")>;
using requests_atom = caf::atom_constant<caf::atom("requests")>;
using latency_atom = caf::atom_constant<caf::atom("latency")>;
using figures_atom = caf::atom_constant<caf::atom("figures")>;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using place_atom = caf::atom_constant<caf::atom("place")>;

// What each replica's requests saw since a moment (runtime/admission/replica_figures.h), for a
// canary rollout's comparison.
using admission::replica_figures;

// A pool's recent latencies (runtime/admission/pool_latencies.h), for the autoscaler and
// `status`: of requests whose first placement was in the pool (time to first token) and of those
// that finished in it (time between tokens). Its inspect is in admin_protocol.h.
using admission::pool_latency;

// Now on the clock replica figures are timed by: the head's steady clock, in seconds.
inline double owner_clock_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A request in progress, for the admin console.
struct request_view {
  std::string id;
  replica_id replica;           // where it runs now (no_replica while being placed)
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;  // streamed so far
  std::int32_t migrations = 0;
  std::int32_t priority = 0;
  double age_seconds = 0;          // since it was submitted
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_view& x) {
  return f(caf::meta::type_name("request_view"), x.id, x.replica, x.prompt_tokens, x.output_tokens, x.migrations, x.priority,
           x.age_seconds);
}

using owner_actor = caf::typed_actor<
    // A client's request; its tokens go to the client's sink in batches. Replies true once a
    // replica accepted it, or an error (bad request, no replica): then no tokens follow.
    caf::replies_to<submit_atom, engine::request, token_sink>::with<bool>,
    // The client gives up on a request: the replica frees its blocks at once.
    caf::reacts_to<abort_atom, std::string>,
    // Tokens from the replicas.
    caf::reacts_to<token_batch>,
    // Every migration so far (for tests, metrics and the admin console).
    caf::replies_to<migrations_atom>::with<std::vector<migration_event>>,
    // The requests in progress (at most `limit`, oldest first).
    caf::replies_to<requests_atom, std::uint32_t>::with<std::vector<request_view>>,
    // Recent latencies by pool, for the autoscaler.
    caf::replies_to<latency_atom>::with<std::vector<pool_latency>>,
    // Each replica's figures since `since` (seconds on the head's steady clock, owner_clock_s).
    caf::replies_to<figures_atom, double>::with<std::vector<replica_figures>>,
    // Placements and migrations go to this sink from now on (the admin console's `watch`).
    caf::reacts_to<watch_atom, admin_event_sink>,
    // Internal, every owner_config::sweep: the book held against the router's live replicas and
    // each replica's own (held_atom), so that every request ends.
    caf::reacts_to<sweep_atom>,
    // Internal: a moving request no replica could take is placed again.
    caf::reacts_to<place_atom, std::string, replica_id>>;

}  // namespace troupe::actors
