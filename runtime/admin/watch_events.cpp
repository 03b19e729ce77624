#include "runtime/admin/watch_events.h"

namespace troupe::admin {

namespace {

nlohmann::json named(replica_id id, const std::vector<replica_status>& replicas) {
  if (id.value < replicas.size()) return replicas[id.value].name;
  return id.value;
}

}  // namespace

nlohmann::json watch_fields(const placement_event& e, const std::vector<replica_status>& replicas) {
  return {{"request", e.request}, {"replica", named(e.replica, replicas)}, {"why", e.why}, {"handoff", e.handoff}};
}

nlohmann::json watch_fields(const admission_event& e, const std::vector<replica_status>& /*replicas*/) {
  return {{"request", e.request}, {"pool", e.pool},     {"admitted", e.admitted},
          {"priority", e.priority}, {"reason", e.reason}, {"retry_after", e.retry_after_s}};
}

nlohmann::json watch_fields(const migration_event& e, const std::vector<replica_status>& replicas) {
  return {{"request", e.request},
          {"from", named(e.from, replicas)},
          {"to", named(e.to, replicas)},
          {"seconds_to_first_token", e.seconds_to_first_token}};
}

}  // namespace troupe::admin
