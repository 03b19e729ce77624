// The paged KV cache's accounting: fixed-size blocks handed out to sequences, reference counted,
// returned to a free list the moment their last holder lets go. Pure bookkeeping: the tensors
// live in kv_cache, indexed by the same block ids.
//
// The free list is in eviction order: allocate() takes from its front, release() appends at its
// back, and take() pulls a free block out of the middle (a prefix-cache hit on a block nobody
// holds). With the prefix cache on top, a free block may still hold a cached prefix; it stays
// findable until allocate() hands it out, so the least recently freed is evicted first.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/common/ids.h"

namespace troupe::kv {

// A block of the pool, 0 .. num_blocks - 1 (block tables in a forward_plan carry .value).
using block_id = id<struct block_tag, std::int32_t>;

class block_pool {
 public:
  explicit block_pool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  int num_free() const { return num_free_; }
  int num_used() const { return num_blocks() - num_free(); }

  // Takes `n` free blocks (ref count 1 each) from the front of the free list. Returns an empty
  // vector and takes nothing if fewer than n are free.
  std::vector<block_id> allocate(int n);

  // Takes one specific free block out of the free list (ref count 1). Precondition: free.
  void take(block_id b);

  // Adds a holder to a block in use (sharing). Precondition: ref_count(b) > 0.
  void share(block_id b);

  // Drops one holder of each block, in the order given; a block whose count reaches 0 goes to
  // the back of the free list. Precondition: every block is in use.
  void release(const std::vector<block_id>& blocks);

  int ref_count(block_id b) const { return ref_counts_[std::size_t(b.value)]; }

  // The free list from front (next evicted) to back, for tests and inspection.
  std::vector<block_id> free_list() const;

 private:
  void push_back(std::int32_t b);
  void unlink(std::int32_t b);

  std::vector<int> ref_counts_;
  std::vector<std::int32_t> prev_, next_;  // the free list, doubly linked by raw id; -1 ends it
  std::int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
};

// Blocks needed to hold `tokens` tokens.
inline int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace troupe::kv
