// What the head's actors tell the admin console (actors/control/admin_actor.h) and what the
// autoscaler asks of it, typed: the `watch` events (runtime/admin/watch_events.h), the
// autoscaler's command and view (runtime/autoscale/autoscaler_control.h), each pool's signals
// (runtime/autoscale/signals.h). JSON is made only at the console's edge.
#pragma once
#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"
#include "actors/protocol/wire_enum.h"
#include "runtime/admin/watch_events.h"
#include "runtime/admission/pool_latencies.h"
#include "runtime/autoscale/autoscaler_control.h"
#include "runtime/autoscale/signals.h"

namespace troupe::admin {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_changed& x) {
  return f(caf::meta::type_name("replica_changed"), x.replica, x.up);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_event& x) {
  return f(caf::meta::type_name("placement_event"), x.request, x.replica, x.why, x.handoff);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_event& x) {
  return f(caf::meta::type_name("admission_event"), x.request, x.pool, x.admitted, x.priority, x.reason, x.retry_after_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_event& x) {
  return f(caf::meta::type_name("migration_event"), x.request, x.from, x.to, x.seconds_to_first_token);
}

}  // namespace troupe::admin

namespace troupe::admission {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_latency& x) {
  return f(caf::meta::type_name("pool_latency"), x.pool, x.ttft_s, x.itl_s, x.ttft_age_s, x.itl_age_s);
}

}  // namespace troupe::admission

namespace troupe::autoscale {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_signals& x) {
  return f(caf::meta::type_name("pool_signals"), x.serving, x.warm, x.min, x.max, x.waiting, x.running, x.slots, x.kv_usage, x.ttft_s, x.itl_s);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, command& x) {
  std::uint8_t what = static_cast<std::uint8_t>(x.what);
  return f(caf::meta::type_name("autoscaler_command"), what, actors::load_enum(what, x.what, command::verb::set), x.pool, x.settings);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, autoscale_config& x) {
  return f(caf::meta::type_name("autoscale_config"), x.enabled, x.interval, x.queue_up, x.queue_down, x.kv_up, x.kv_down, x.busy_down,
           x.ttft_slo_s, x.itl_slo_s, x.up_for, x.down_for, x.cooldown);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, view& x) {
  return f(caf::meta::type_name("autoscaler_view"), x.paused, x.pinned, x.last, x.cfg);
}

}  // namespace troupe::autoscale

namespace troupe::actors {

using event_atom = caf::atom_constant<caf::atom("event")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;

// Where the router and the request owner send their events while the console watches.
using admin_event_sink = caf::typed_actor<caf::reacts_to<event_atom, admin::replica_changed>,
                                          caf::reacts_to<event_atom, admin::placement_event>,
                                          caf::reacts_to<event_atom, admin::admission_event>,
                                          caf::reacts_to<event_atom, admin::migration_event>>;

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using signals_atom = caf::atom_constant<caf::atom("signals")>;
using scale_atom = caf::atom_constant<caf::atom("scale")>;
using autoscaler_atom = caf::atom_constant<caf::atom("autoscale")>;

// Each pool's signals now, latencies older than the duration (in ms) counting as none.
using pool_signal_map = std::map<std::string, autoscale::pool_signals>;

// The autoscaler (actors/control/autoscaler.h): looks every interval; runs the console's
// `autoscaler` command and answers with its state, or an error naming what was wrong.
using autoscaler_actor =
    caf::typed_actor<caf::reacts_to<tick_atom>, caf::replies_to<autoscaler_atom, autoscale::command>::with<autoscale::view>>;

}  // namespace troupe::actors
