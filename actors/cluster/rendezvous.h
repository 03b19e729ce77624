// Where the ranks of a group meet to connect their collectives when they are not all in one
// process: a key-value actor the group supervisor serves for each generation (Gloo publishes
// each rank's address under a key and waits for the others'). It replaces a shared directory,
// so ranks on different hosts need nothing but the actor layer to find each other, and a
// generation's keys go with its actor when the group restarts.
//
// Bounded: at most `max_keys` keys of at most `max_value` bytes (a group's ranks publish a few
// each); past either a set fails, naming the limit.
#pragma once
#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "runtime/collectives/gloo.h"

namespace troupe::actors {

using rdv_set_atom = caf::atom_constant<caf::atom("rdvset")>;
using rdv_get_atom = caf::atom_constant<caf::atom("rdvget")>;

struct rendezvous_state {
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<caf::response_promise>> waiting;  // gets for keys not set yet
  std::size_t max_keys = 4096, max_value = 64 * 1024;
  static inline const char* name = "troupe.rendezvous";
};

// set(key, value) -> bool; get(key) -> value, answered once the key is set (the caller's request
// timeout bounds the wait). When it is stopped (an exit message) or `owner` (the group's
// supervisor) ends, every get still waiting fails at once, so a rank blocked in its connect
// wakes instead of waiting out its deadline.
caf::behavior rendezvous_store(caf::stateful_actor<rendezvous_state>* self, caf::actor owner);

// The rendezvous service over `store` for a rank's blocking connect (a detached actor's thread
// or a plain thread, never an event-based actor's).
collectives::rendezvous rendezvous_client(caf::actor_system& sys, caf::actor store);

}  // namespace troupe::actors
