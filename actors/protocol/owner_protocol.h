// Talking to the request owner: the actor on the head that owns every request from submission
// to its last token, and moves it to another replica if the one serving it dies.
#pragma once
#include <caf/all.hpp>

#include "actors/protocol/engine_protocol.h"

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

using owner_actor = caf::typed_actor<
    // A client's request; its tokens go to the client's sink in batches. Replies true once a
    // replica accepted it, or an error (bad request, no replica): then no tokens follow.
    caf::replies_to<submit_atom, engine::request, token_sink>::with<bool>,
    // The client gives up on a request: the replica frees its blocks at once.
    caf::reacts_to<abort_atom, std::string>,
    // Tokens from the replicas.
    caf::reacts_to<token_batch>,
    // Every migration so far (for tests, metrics and the admin console).
    caf::replies_to<migrations_atom>::with<std::vector<migration_event>>>;

}  // namespace troupe::actors
