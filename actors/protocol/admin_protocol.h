// What the head's actors tell the admin console (actors/control/admin_actor.h) as it happens: events
// for `watch`, each a kind and its fields as JSON text (docs/admin.md lists them). Replica
// fields carry replica ids; the admin actor names them.
#pragma once
#include <caf/all.hpp>

#include <string>
#include <vector>

namespace troupe::actors {

using event_atom = caf::atom_constant<caf::atom("event")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;

// Receives (event_atom, kind, fields as a JSON object's text).
using admin_event_sink = caf::typed_actor<caf::reacts_to<event_atom, std::string, std::string>>;

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using scale_atom = caf::atom_constant<caf::atom("scale")>;
using autoscaler_atom = caf::atom_constant<caf::atom("autoscale")>;

// The autoscaler (actors/control/autoscaler.h): looks every interval; the console's `autoscaler ARGS`
// (status, pause, resume, pin POOL, unpin POOL, set KEY=VALUE...) answer as JSON text, or an
// error naming what was wrong.
using autoscaler_actor =
    caf::typed_actor<caf::reacts_to<tick_atom>, caf::replies_to<autoscaler_atom, std::vector<std::string>>::with<std::string>>;

}  // namespace troupe::actors
