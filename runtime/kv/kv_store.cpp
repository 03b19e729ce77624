#include "runtime/kv/kv_store.h"

#include <algorithm>
#include <stdexcept>

namespace troupe::kv {

kv_store_index::kv_store_index(int slots) : slot_(std::size_t(std::max(slots, 0))) {
  for (int s = slots - 1; s >= 0; --s) free_.push_back(s);
}

void kv_store_index::touch(std::int32_t s) {
  auto& si = slot_[std::size_t(s)];
  lru_.erase(si.lru);
  si.lru = lru_.insert(lru_.end(), s);
}

std::optional<std::int32_t> kv_store_index::reserve(block_hash h, std::vector<block_hash>& dropped) {
  if (by_hash_.count(h)) return std::nullopt;
  std::int32_t s = -1;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (slot_[std::size_t(*it)].pins == 0) {
        s = *it;
        break;
      }
    if (s < 0) return std::nullopt;
    auto& old = slot_[std::size_t(s)];
    lru_.erase(old.lru);
    by_hash_.erase(old.hash);
    dropped.push_back(old.hash);
  }
  auto& si = slot_[std::size_t(s)];
  si.st = state::writing;
  si.hash = h;
  si.pins = 1;
  by_hash_[h] = s;
  return s;
}

void kv_store_index::commit(block_hash h) {
  auto it = by_hash_.find(h);
  if (it == by_hash_.end() || slot_[std::size_t(it->second)].st != state::writing) throw std::logic_error("kv_store_index::commit: not reserved");
  auto& si = slot_[std::size_t(it->second)];
  si.st = state::held;
  si.pins = 0;
  si.lru = lru_.insert(lru_.end(), it->second);
}

void kv_store_index::abort(block_hash h) {
  auto it = by_hash_.find(h);
  if (it == by_hash_.end() || slot_[std::size_t(it->second)].st != state::writing) throw std::logic_error("kv_store_index::abort: not reserved");
  auto& si = slot_[std::size_t(it->second)];
  si = slot_info{};
  free_.push_back(it->second);
  by_hash_.erase(it);
}

std::vector<std::int32_t> kv_store_index::pin_prefix(std::span<const block_hash> hashes) {
  std::vector<std::int32_t> out;
  for (block_hash h : hashes) {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end() || slot_[std::size_t(it->second)].st != state::held) break;
    out.push_back(it->second);
  }
  for (auto s : out) {
    ++slot_[std::size_t(s)].pins;
    touch(s);
  }
  return out;
}

int kv_store_index::matched(std::span<const block_hash> hashes) const {
  int n = 0;
  for (block_hash h : hashes) {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end() || slot_[std::size_t(it->second)].st != state::held) break;
    ++n;
  }
  return n;
}

std::optional<std::int32_t> kv_store_index::slot_of(block_hash h) const {
  auto it = by_hash_.find(h);
  if (it == by_hash_.end() || slot_[std::size_t(it->second)].st != state::held) return std::nullopt;
  return it->second;
}

bool kv_store_index::erase(block_hash h) {
  auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return false;
  auto& si = slot_[std::size_t(it->second)];
  if (si.st != state::held || si.pins > 0) return false;
  lru_.erase(si.lru);
  free_.push_back(it->second);
  si = slot_info{};
  by_hash_.erase(it);
  return true;
}

void kv_store_index::unpin(std::span<const std::int32_t> slots) {
  for (auto s : slots) {
    auto& si = slot_[std::size_t(s)];
    if (si.st == state::held && si.pins > 0) --si.pins;
  }
}

std::vector<block_hash> kv_store_index::hashes() const {
  std::vector<block_hash> out;
  for (auto& [h, s] : by_hash_)
    if (slot_[std::size_t(s)].st == state::held) out.push_back(h);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe::kv
