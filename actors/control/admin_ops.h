// The admin actor's moves, shared by the files that implement its commands (admin_actor.cpp,
// admin_swap.cpp): replies and events, and the steps of a replica's life carried out through the
// router and the node registry. Internal to actors/control.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/control/admin_state.h"
#include "runtime/admin/swap_plan.h"
#include "runtime/admin/watch_events.h"

namespace troupe::actors::admin_ops {

using admin_ptr = admin_actor::stateful_pointer<admin_state>;

constexpr std::uint32_t max_listed = 1000;  // requests `requests` lists at most, oldest first

void answer(admin_ptr self, std::uint64_t token, nlohmann::json result);
void refuse(admin_ptr self, std::uint64_t token, std::string why);
// An event for `watch` (operators' actions, state changes and swaps also go to the log).
void emit(admin_ptr self, const std::string& kind, nlohmann::json fields);
// A serving actor's event, its replicas named, for `watch`.
template <class Event>
void publish(admin_ptr self, const Event& e) {
  emit(self, Event::kind, admin::watch_fields(e, self->state.replicas));
}
// Tells `watch` that replica `i` is now in `state`, once per change.
void announce(admin_ptr self, std::size_t i, const std::string& state);
// Asks the router which replicas live and each live one for its load, then runs `then`.
void refresh(admin_ptr self, std::function<void()> then);
// Drains replica `i`; `done` gets nothing once it is empty, or why it did not get there.
void drain(admin_ptr self, std::size_t i, std::function<void(std::optional<std::string>)> done);
// Starts the stopped replicas `ids` through the node registry (each registers warm: parked);
// `then` gets the first failure, if any.
void start_replicas(admin_ptr self, const std::vector<std::size_t>& ids, std::function<void(std::optional<std::string>)> then);
// Stops replica `i` through the node registry; `done` gets nothing, or why it could not.
void stop_replica(admin_ptr self, std::size_t i, std::function<void(std::optional<std::string>)> done);
// Places on warm replica `i` again.
void unpark(admin_ptr self, std::size_t i);
// Stops the warm replicas `ids` (their memory goes back to their nodes).
void stop_replicas(admin_ptr self, const std::vector<std::size_t>& ids);

// The replicas of the topology, named "<pool>-<i>", before any has registered.
std::vector<admin::replica_status> placed_replicas(const topology::topology_config& topo);
// The replica `args[0]` names, alive, or an error reply (false).
bool named_replica(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args, std::size_t& index);
std::vector<admin::pool_bounds> pool_bounds(const topology::topology_config& t);

struct pool_members {
  std::vector<std::size_t> serving, warm, stopped;  // by replica id
};
pool_members members_of(admin_ptr self, const std::string& pool);
// Brings the pool's warm replicas to `target`: starts stopped ones, or stops the newest warm ones.
void keep_warm(admin_ptr self, const std::string& pool, int target);

using step_done = std::function<void(std::optional<std::string>)>;
using swap_done = std::function<void(std::optional<std::string> error, nlohmann::json result)>;

// Brings the serving replicas of req.pool to the revision req names (req.dir empty: the model
// each process was started with), `want` of them (a canary's), or all when negative, as `swap`
// does; `done` gets the result or why not (admin_swap.cpp).
void swap_pool(admin_ptr self, const admin::swap_request& req, int want, swap_done done);
// Undoes the drain of a replica a swap is retiring when no other replica of its pool serves
// (admin_state::guarded_drains): called after each refresh of the tick.
void guard_drains(admin_ptr self);

// `swap POOL --model DIR [--revision R]` (admin_swap.cpp)
void cmd_swap(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args);

// `rollout ...` and `rollback POOL` (admin_rollout.cpp), and the rollouts' look every tick.
void cmd_rollout(admin_ptr self, std::uint64_t token, const std::string& cmd, const std::vector<std::string>& args);
void rollout_tick(admin_ptr self);

}  // namespace troupe::actors::admin_ops
