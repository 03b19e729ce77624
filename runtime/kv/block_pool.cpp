#include "runtime/kv/block_pool.h"

#include <cassert>

namespace troupe::kv {

block_pool::block_pool(int num_blocks) : ref_counts_(static_cast<std::size_t>(num_blocks), 0) {
  for (block_id b = 0; b < num_blocks; ++b) free_.push_back(b);
}

std::vector<block_id> block_pool::allocate(int n) {
  if (n < 0 || n > num_free()) return {};
  std::vector<block_id> out;
  out.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    block_id b = free_.front();
    free_.pop_front();
    ref_counts_[static_cast<std::size_t>(b)] = 1;
    out.push_back(b);
  }
  return out;
}

void block_pool::share(block_id b) {
  assert(ref_count(b) > 0);
  ++ref_counts_[static_cast<std::size_t>(b)];
}

void block_pool::release(const std::vector<block_id>& blocks) {
  for (block_id b : blocks) {
    int& rc = ref_counts_[static_cast<std::size_t>(b)];
    assert(rc > 0);
    if (--rc == 0) free_.push_back(b);
  }
}

}  // namespace troupe::kv
