// vLLM's KV-event wire format, so tools written for vLLM read Troupe's events: a batch is the
// MessagePack array [timestamp, [event, ...], data_parallel_rank, kv_dtype], each event an array
// whose first element is its tag:
//   ["BlockStored", block_hashes, parent_block_hash | nil, token_ids, block_size, lora_id, medium]
//   ["BlockRemoved", block_hashes, medium]
//   ["AllBlocksCleared"]
// Block hashes are unsigned 64-bit integers (block_hash.h), lora_id is nil (no adapters yet),
// data_parallel_rank is the replica id, and medium is "GPU" for a replica's own cache (vLLM's
// name for the primary tier, whatever the device) or the event's medium otherwise. kv_dtype
// ("f32", "f16", "bf16", "int8") is Troupe's, after vLLM's fields: msgspec, which vLLM's
// consumers decode with, ignores an array-like struct's extra trailing elements.
#pragma once
#include <string>

#include "runtime/kv/kv_events.h"

namespace troupe::kv {

std::string encode_kv_event_batch(const kv_event_batch& b);

}  // namespace troupe::kv
