// The admin console's commands (docs/admin.md), run against the head's router and the
// replicas it knows: status, topology, kv, drain, resume, kill, scale, swap, rollout. Thin: it gathers replica views
// and load reports and hands them to runtime/admin/cluster_status.h for their form. Replies and
// events leave through callbacks (the ZeroMQ endpoint's queue, actors/control/admin_endpoint.h).
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/control/admin_state.h"

namespace troupe::actors {

admin_actor::behavior_type admin(admin_actor::stateful_pointer<admin_state> self, admin_config cfg);

// Scales `pool` to `n` serving replicas (what `scale` and the autoscaler do); `done` gets
// (true, the result) or (false, why as a string).
void scale_pool(admin_actor::stateful_pointer<admin_state> self, const std::string& pool, int n, const std::string& reason,
                std::function<void(bool, nlohmann::json)> done);

}  // namespace troupe::actors
