// What the head's actors tell the admin console (actors/admin_actor.h) as it happens: events
// for `watch`, each a kind and its fields as JSON text (docs/admin.md lists them). Replica
// fields carry replica ids; the admin actor names them.
#pragma once
#include <caf/all.hpp>

#include <string>

namespace troupe::actors {

using event_atom = caf::atom_constant<caf::atom("event")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;

// Receives (event_atom, kind, fields as a JSON object's text).
using admin_event_sink = caf::typed_actor<caf::reacts_to<event_atom, std::string, std::string>>;

}  // namespace troupe::actors
