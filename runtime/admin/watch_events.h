// The events the head's serving actors send the admin console for `watch` (docs/admin.md lists
// them), as plain values: the router's replica_changed, the request owner's placement, admission
// refusal and migration. They cross actors typed; the admin actor names their replicas and
// publishes each as one JSON object, whose form is decided here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/admin/cluster_status.h"
#include "runtime/common/ids.h"

namespace troupe::admin {

// A replica registered (up) or was lost (down). Not published as is: the admin actor refreshes
// its view at once and announces the state that changed.
struct replica_changed {
  replica_id replica;
  bool up = false;
};

// A request was placed on a replica (handoff: with KV to pull from another one).
struct placement_event {
  static constexpr const char* kind = "placement";
  std::string request;
  replica_id replica;
  std::string why;  // the router's reason
  bool handoff = false;
};

// A request refused by its pool's admission queue, with the wait it was told.
struct admission_event {
  static constexpr const char* kind = "admission";
  std::string request, pool;
  bool admitted = false;
  std::int32_t priority = 0;
  std::string reason;
  double retry_after_s = 0;
};

// A moved request's first token from its new replica.
struct migration_event {
  static constexpr const char* kind = "migration";
  std::string request;
  replica_id from, to;
  double seconds_to_first_token = 0;
};

// The fields `watch` prints; a replica is named from `replicas` (indexed by id), one out of range
// stays its number.
nlohmann::json watch_fields(const placement_event& e, const std::vector<replica_status>& replicas);
nlohmann::json watch_fields(const admission_event& e, const std::vector<replica_status>& replicas);
nlohmann::json watch_fields(const migration_event& e, const std::vector<replica_status>& replicas);

}  // namespace troupe::admin
