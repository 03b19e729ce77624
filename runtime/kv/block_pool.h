// The paged KV cache's accounting: fixed-size blocks handed out to sequences, reference counted,
// returned to a free list the moment their last holder lets go. Pure bookkeeping: the tensors
// live in kv_cache, indexed by the same block ids.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

namespace troupe::kv {

using block_id = std::int32_t;

class block_pool {
 public:
  explicit block_pool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }

  // Takes `n` free blocks (ref count 1 each), oldest-freed first. Returns an empty vector and
  // takes nothing if fewer than n are free.
  std::vector<block_id> allocate(int n);

  // Adds a holder to a block in use (sharing). Precondition: ref_count(b) > 0.
  void share(block_id b);

  // Drops one holder of each block; a block whose count reaches 0 goes to the back of the free
  // list. Precondition: every block is in use.
  void release(const std::vector<block_id>& blocks);

  int ref_count(block_id b) const { return ref_counts_[static_cast<std::size_t>(b)]; }

 private:
  std::vector<int> ref_counts_;
  std::deque<block_id> free_;
};

// Blocks needed to hold `tokens` tokens.
inline int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace troupe::kv
