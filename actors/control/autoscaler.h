// The autoscaler actor: every interval it asks the admin actor for each pool's signals
// (runtime/autoscale/signals.h: replicas, queues, KV use, recent latencies), asks the pure
// policy (runtime/autoscale/autoscale.h) how many replicas each pool should run, and has the
// admin actor scale the pool (warm replicas join; drained ones return to the warm pool). Every
// decision is logged and sent to `watch` (as a `scale` event with its reason). The console can
// pause it, pin a pool where it is, and change its thresholds.
#pragma once
#include <caf/all.hpp>

#include <map>
#include <set>
#include <string>

#include "actors/control/admin_actor.h"
#include "actors/protocol/admin_protocol.h"
#include "runtime/autoscale/autoscale.h"

namespace troupe::actors {

struct autoscaler_state {
  autoscale::autoscale_config cfg;
  admin_actor admin;
  bool paused = false;
  std::set<std::string> pinned;  // pools held where they are
  std::set<std::string> busy;    // pools with a scale in progress
  std::map<std::string, autoscale::pool_memory> memory;
  std::map<std::string, std::string> last;  // pool -> its last decision's reason
  std::map<std::string, autoscale::clock::time_point> failed_at;  // a scale that failed waits a cooldown
  static inline const char* name = "troupe.autoscaler";
};

autoscaler_actor::behavior_type autoscaler(autoscaler_actor::stateful_pointer<autoscaler_state> self, autoscale::autoscale_config cfg,
                                           admin_actor admin);

}  // namespace troupe::actors
