// What a replica's prefix cache tells the world: blocks stored (now findable by hash), blocks
// removed (evicted), and everything cleared (a restart or a cache reset). vLLM's KV-event model,
// so the same consumers (a KV-aware router, an external indexer) can read either.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "runtime/common/ids.h"
#include "runtime/kv/block_hash.h"

namespace troupe::kv {

enum class kv_event_kind : std::uint8_t { stored, removed, cleared };

struct kv_event {
  kv_event_kind kind = kv_event_kind::stored;
  std::vector<block_hash> hashes;      // stored, removed: the blocks, in chain order for stored
  block_hash parent = 0;               // stored: the hash before the first one
  bool has_parent = false;             // stored: false when the first block starts a chain
  std::vector<std::int32_t> token_ids; // stored: the blocks' tokens, block_size per block
  std::int32_t block_size = 0;         // stored
  std::string medium = "gpu";          // where the blocks live (vLLM's names: gpu, cpu, disk)
};

// A step's events from one replica, in order. Sequence numbers count batches per replica and
// generation; a receiver that sees a gap knows its view of that replica is incomplete.
struct kv_event_batch {
  replica_id replica;
  std::uint64_t generation = 0;  // grows at every restart and cache reset of the replica
  std::uint64_t seq = 0;         // 1, 2, ... within the generation
  double timestamp = 0;          // seconds since the Unix epoch, when the step ended
  std::vector<kv_event> events;
  // The element type of the blocks' KV (f16, int8, ...): a block held in one dtype is no prefix
  // hit for a cache of another, whose pull of it the layout check refuses.
  kernels::dtype kv_type = kernels::dtype::f32;
};

}  // namespace troupe::kv
