#include "runtime/kv/block_pool.h"

#include <stdexcept>
#include <string>

namespace troupe::kv {

block_pool::block_pool(int num_blocks)
    : ref_counts_(std::size_t(num_blocks), 0), prev_(std::size_t(num_blocks), -1), next_(std::size_t(num_blocks), -1) {
  for (std::int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

void block_pool::push_back(std::int32_t b) {
  prev_[std::size_t(b)] = tail_;
  next_[std::size_t(b)] = -1;
  if (tail_ >= 0) next_[std::size_t(tail_)] = b; else head_ = b;
  tail_ = b;
  ++num_free_;
}

void block_pool::unlink(std::int32_t b) {
  const std::int32_t p = prev_[std::size_t(b)], n = next_[std::size_t(b)];
  if (p >= 0) next_[std::size_t(p)] = n; else head_ = n;
  if (n >= 0) prev_[std::size_t(n)] = p; else tail_ = p;
  prev_[std::size_t(b)] = next_[std::size_t(b)] = -1;
  --num_free_;
}

std::vector<block_id> block_pool::allocate(int n) {
  if (n < 0 || n > num_free()) return {};
  std::vector<block_id> out;
  out.reserve(std::size_t(n));
  for (int i = 0; i < n; ++i) {
    const std::int32_t b = head_;
    unlink(b);
    ref_counts_[std::size_t(b)] = 1;
    out.push_back(block_id(b));
  }
  return out;
}

void block_pool::take(block_id b) {
  if (ref_count(b) != 0) throw std::logic_error("block_pool::take: block " + to_string(b) + " is in use");
  unlink(b.value);
  ref_counts_[std::size_t(b.value)] = 1;
}

void block_pool::share(block_id b) {
  if (ref_count(b) <= 0) throw std::logic_error("block_pool::share: block " + to_string(b) + " is free");
  ++ref_counts_[std::size_t(b.value)];
}

void block_pool::release(const std::vector<block_id>& blocks) {
  for (block_id b : blocks) {
    int& rc = ref_counts_[std::size_t(b.value)];
    if (rc <= 0) throw std::logic_error("block_pool::release: block " + to_string(b) + " is already free");
    if (--rc == 0) push_back(b.value);
  }
}

std::vector<block_id> block_pool::free_list() const {
  std::vector<block_id> out;
  for (std::int32_t b = head_; b >= 0; b = next_[std::size_t(b)]) out.push_back(block_id(b));
  return out;
}

}  // namespace troupe::kv
