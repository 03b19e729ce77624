// A node's KV store, as bookkeeping: which prefix blocks it holds (by hash), in which of its
// slots, how recently each was used, and which are pinned (being written, or being read by a
// replica's pull). The bytes live in the store's own kv_cache, slot = block id there, so a
// replica pulls from the store exactly as from another replica (runtime/kv/transfer).
//
// Replicas offload the prefix blocks they let go of (kv_cache_manager::take_offloads): the store
// keeps the most recently used ones its capacity allows and drops the least recently used
// unpinned one to make room. A lookup finds the longest run of a request's leading hashes held
// here and pins it until the replica that pulls it releases it.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv/block_hash.h"

namespace troupe::kv {

class kv_store_index {
 public:
  explicit kv_store_index(int slots);

  int slots() const { return int(slot_.size()); }
  int held() const { return int(by_hash_.size()); }  // blocks findable (committed)

  // A slot to write block `h` into: a free one, else the least recently used unpinned block's
  // (that block is dropped and its hash appended to `dropped`). Nothing when `h` is here already
  // or every slot is pinned. The slot is pinned until commit or abort.
  std::optional<std::int32_t> reserve(block_hash h, std::vector<block_hash>& dropped);
  // The bytes of reserved block `h` are in place: findable from now, most recently used.
  void commit(block_hash h);
  // The write of reserved block `h` failed: its slot is free again.
  void abort(block_hash h);

  // The slots of the longest run of leading `hashes` held here, pinned and marked used.
  std::vector<std::int32_t> pin_prefix(std::span<const block_hash> hashes);
  // How many leading `hashes` are held (no pin, no use).
  int matched(std::span<const block_hash> hashes) const;
  // Whether `h` is held (committed), and its slot.
  std::optional<std::int32_t> slot_of(block_hash h) const;
  // Forgets held, unpinned block `h` (moved to another tier); false if it is not such a block.
  bool erase(block_hash h);
  void unpin(std::span<const std::int32_t> slots);

  // Every hash held, sorted (a subscriber's snapshot).
  std::vector<block_hash> hashes() const;

 private:
  enum class state : std::uint8_t { free, writing, held };
  struct slot_info {
    state st = state::free;
    block_hash hash = 0;
    int pins = 0;
    std::list<std::int32_t>::iterator lru;  // in lru_ while held
  };
  void touch(std::int32_t s);

  std::vector<slot_info> slot_;
  std::vector<std::int32_t> free_;
  std::list<std::int32_t> lru_;  // held slots, least recently used first
  std::unordered_map<block_hash, std::int32_t> by_hash_;  // held and writing
};

}  // namespace troupe::kv
