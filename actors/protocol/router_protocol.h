// Asking the router where a request should run. The router decides; it does not forward.
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>

#include "actors/protocol/admin_protocol.h"
#include "actors/protocol/engine_protocol.h"
#include "actors/protocol/store_protocol.h"

namespace troupe::actors {

// "No replica" where one may be named (route_query::avoid).
inline constexpr replica_id no_replica{UINT32_MAX};

struct route_query {
  std::string request;
  std::int32_t prompt_tokens = 0;
  std::int32_t priority = 0;
  replica_id avoid = no_replica;  // a replica not to pick (the one a request just left)
  bool decode = false;  // a request handed off after its prefill: decode-capable replicas only
  // What keys its prefix-cache blocks (engine::request's fields), for KV-aware routing: the
  // prompt and the tokens generated so far, the tenant's salt and the public prefix length.
  std::vector<std::int32_t> tokens;
  std::string cache_salt;
  std::int32_t public_prefix = 0;
  std::string adapter;  // its LoRA adapter's identity (engine::request::adapter); empty: the base
  std::string model;    // the topology's model it is for (engine::request::model): only its replicas take it
  std::string user;     // who sends it (engine::request::user; else its id): a canary split keeps them on one side
  std::int8_t split_side = -1;  // engine::request::split_side: a side it is pinned to, else -1
};

struct route_reply {
  bool placed = false;
  replica_id replica;
  scheduler_actor scheduler;  // valid when placed
  std::string why;            // the policy's reason, or why nothing could be placed
  bool prefill_only = false;  // placed on a prefill replica: it hands the request off after its first token
  // A KV store holds more of this request's prefix than the chosen replica: the owner looks
  // these leading hashes up there and the replica pulls what is found instead of computing it.
  kv_store_actor store;
  std::vector<kv::block_hash> store_hashes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_query& x) {
  return f(caf::meta::type_name("route_query"), x.request, x.prompt_tokens, x.priority, x.avoid, x.decode, x.tokens,
           x.cache_salt, x.public_prefix, x.adapter, x.model, x.user, x.split_side);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_reply& x) {
  return f(caf::meta::type_name("route_reply"), x.placed, x.replica, x.scheduler, x.why, x.prefill_only, x.store,
           x.store_hashes);
}

using route_atom = caf::atom_constant<caf::atom("route")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
using live_atom = caf::atom_constant<caf::atom("live")>;
using timing_atom = caf::atom_constant<caf::atom("timing")>;
using replicas_atom = caf::atom_constant<caf::atom("replicas")>;
using router_stats_atom = caf::atom_constant<caf::atom("rstats")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using view_atom = caf::atom_constant<caf::atom("view")>;
using policy_atom = caf::atom_constant<caf::atom("policy")>;
using model_key_atom = caf::atom_constant<caf::atom("modelkey")>;
using canary_atom = caf::atom_constant<caf::atom("canary")>;

// One replica as the router knows it, for the admin console: every replica that ever
// registered, dead ones included.
struct replica_view {
  replica_id replica;
  scheduler_actor scheduler;  // null while dead
  bool alive = false;
  bool draining = false;          // placed on no more
  std::uint32_t generation = 0;   // how many times it registered (1: never restarted)
  bool parked = false;            // in the warm pool: alive, placed on by nobody
  bool stopped = false;           // stopped on purpose (a scale-down), until it registers again
  bool suspect = false;           // alive, but silent past timeouts.suspect: placed on only if no other can take it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_view& x) {
  return f(caf::meta::type_name("replica_view"), x.replica, x.scheduler, x.alive, x.draining, x.generation, x.parked,
           x.stopped, x.suspect);
}

// What the router has done, for /metrics and the admin console. Labels are fixed sets.
struct router_stats {
  std::vector<std::pair<std::string, std::uint64_t>> decisions;  // by the policy's reason
  std::uint64_t kv_batches = 0;         // KV event batches received from replicas
  std::uint64_t kv_stale = 0;           // of them, from an old generation or already known
  std::uint64_t kv_gaps = 0;            // times a replica's stream had a gap (snapshot asked)
  std::uint64_t events_published = 0;   // events sent on the ZeroMQ endpoint
  std::uint64_t events_dropped = 0;     // events the publisher could not keep up with
  std::uint64_t stores = 0;             // KV stores followed
  std::uint64_t store_blocks = 0;       // blocks the index holds for them
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_stats& x) {
  return f(caf::meta::type_name("router_stats"), x.decisions, x.kv_batches, x.kv_stale, x.kv_gaps, x.events_published,
           x.events_dropped, x.stores, x.store_blocks);
}

using router_actor = caf::typed_actor<
    // Pick a live replica for a request (placed == false when none can take it).
    caf::replies_to<route_atom, route_query>::with<route_reply>,
    // A replica joins (or comes back under a new handle). The router monitors it and stops
    // placing on it the moment it goes down. Replies once the replica can be placed on.
    caf::replies_to<replica_atom, replica_id, scheduler_actor>::with<bool>,
    // How many replicas can be placed on now.
    caf::replies_to<live_atom>::with<std::uint32_t>,
    // A node's KV store joins (id store_id_base + node): the router follows its contents
    // through its KV events and points requests at it when it holds more of their prefix.
    caf::reacts_to<store_atom, replica_id, kv_store_actor>,
    // Place nothing more on replica R (it is draining) until it registers again.
    caf::reacts_to<drain_atom, replica_id>,
    // Place on replica R again (a drain ended, or it leaves the warm pool).
    caf::reacts_to<resume_atom, replica_id>,
    // Place on replica R no more: it joins the warm pool (after a drain, scaling down).
    caf::reacts_to<park_atom, replica_id>,
    // Replica R is being stopped on purpose (scaled down): forget its handle and place nothing
    // on it, without calling its end a death. Replies true (false: not registered here).
    caf::replies_to<retire_atom, replica_id>::with<bool>,
    // Every replica that registered, by id.
    caf::replies_to<view_atom>::with<std::vector<replica_view>>,
    // Route with another policy from now on (a name in routing::registry, its parameters):
    // replies true, or an error naming an unknown policy or parameter (nothing changes then).
    caf::replies_to<policy_atom, std::string, std::vector<std::pair<std::string, double>>>::with<bool>,
    // A swap ended: the model's (topology name, "" for [model]) replicas now run weights with
    // this cache key, under which prompts are hashed for KV-aware placement from now on.
    caf::reacts_to<model_key_atom, std::string, std::string>,
    // A canary rollout of a model (topology name): `share` of its senders go to the replicas
    // running `key` (routing::canary_side), the others to the rest; a share of 0 ends the split.
    caf::reacts_to<canary_atom, std::string, std::string, double>,
    // Replicas that register ("replica_up") or go down ("replica_down") are told to this sink.
    caf::reacts_to<watch_atom, admin_event_sink>,
    // The live replicas' schedulers, wherever they run (for load queries and tools).
    caf::replies_to<replicas_atom>::with<std::vector<scheduler_actor>>,
    // The time each routing decision took, in nanoseconds, oldest first (the last 100,000).
    caf::replies_to<timing_atom>::with<std::vector<std::int64_t>>,
    // A request placed on a replica made progress: `prompt_tokens` of its prompt are computed
    // (its first token came; 0 if not news) and whether it left the replica. Keeps the load the
    // router weighs current between two load reports.
    caf::reacts_to<progress_atom, replica_id, std::int32_t, bool>,
    // A replica's KV events (the router subscribes to each replica it registers).
    caf::reacts_to<kv::kv_event_batch>,
    // Decisions by reason and KV-event counts.
    caf::replies_to<router_stats_atom>::with<router_stats>,
    // Internal: refresh the replicas' load reports.
    caf::reacts_to<poll_atom>>;

void register_router_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
