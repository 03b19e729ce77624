// Talking to a node's KV store (actors/serving/kv_store_actor.h): replicas offload the prefix blocks they
// let go of, request owners look a request's prefix up and hand the resulting handle to the
// replica that pulls it, and routers follow its contents through KV events (medium "cpu").
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"
#include "runtime/engine/engine.h"

namespace troupe::kv {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, offload_block& x) {
  return f(caf::meta::type_name("offload_block"), x.block, x.hash, x.parent, x.has_parent, x.tokens);
}

}  // namespace troupe::kv

namespace troupe::engine {

// What a replica offers a store is what its engine hands out (engine::take_offloads).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, offload_batch& x) {
  return f(caf::meta::type_name("offload_batch"), x.from, x.blocks);
}

}  // namespace troupe::engine

namespace troupe::actors {

// Stores have replica ids of their own, above every replica's, in the KV events and the router.
inline constexpr std::uint32_t store_id_base = 1u << 30;


// What a store holds and has done, for tests, metrics and the admin console.
struct store_report {
  std::int32_t slots = 0;           // blocks it can hold
  std::int32_t held = 0;            // blocks it holds now
  std::uint64_t stored = 0;         // blocks copied in from replicas
  std::uint64_t dropped = 0;        // blocks dropped to make room
  std::uint64_t lookups = 0;        // prefixes looked up
  std::uint64_t hit_blocks = 0;     // blocks those lookups found (and handed out)
  std::int32_t disk_slots = 0;      // blocks the file can hold (0: no file)
  std::int32_t disk_held = 0;
  std::uint64_t demoted = 0;        // blocks moved from memory to the file
  std::uint64_t promoted = 0;       // blocks moved back for a lookup
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_report& x) {
  return f(caf::meta::type_name("store_report"), x.slots, x.held, x.stored, x.dropped, x.lookups, x.hit_blocks, x.disk_slots,
           x.disk_held, x.demoted, x.promoted);
}

using offload_atom = caf::atom_constant<caf::atom("offload")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using store_atom = caf::atom_constant<caf::atom("store")>;

using kv_store_actor = caf::typed_actor<
    // Copy these blocks in (those not held already, as room allows): replies how many it stored.
    // The replica keeps the blocks pinned until the reply.
    caf::replies_to<offload_atom, engine::offload_batch>::with<std::uint32_t>,
    // The longest run of these leading hashes held here, as a handle for request R's replica to
    // pull; pinned until released (or the hold expires). Empty when none is held.
    caf::replies_to<lookup_atom, std::string, std::vector<kv::block_hash>>::with<kv::transfer::kv_handle>,
    // As a scheduler holding a handed-off request's KV: still held? (then for another hold)
    caf::replies_to<claim_atom, std::string>::with<bool>,
    caf::reacts_to<release_atom, std::string>,
    caf::reacts_to<hold_atom, std::string, std::uint64_t>,
    // KV events to the sink from now on, as store `r`; replies with what it holds now.
    caf::replies_to<kv_subscribe_atom, replica_id, kv_event_sink>::with<kv_snapshot>,
    caf::replies_to<load_atom>::with<store_report>>;

void register_store_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
