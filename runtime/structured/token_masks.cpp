#include "runtime/structured/token_masks.h"

#include <algorithm>
#include <optional>

namespace troupe::structured {

vocabulary::vocabulary(std::vector<std::string> token_bytes, std::vector<std::int32_t> eos_ids)
    : bytes(std::move(token_bytes)), eos(std::move(eos_ids)), trie(bytes) {}

masks::masks(std::shared_ptr<const vocabulary> vocab, std::size_t max_bytes) : vocab_(std::move(vocab)) {
  const std::size_t per = std::max<std::size_t>(64, (vocab_->size() + 63) / 64 * 8 + 96);
  capacity_ = std::max<std::size_t>(16, max_bytes / per);
}

token_mask masks::compute(const grammar_matcher& m) const {
  token_mask mask(vocab_->size());
  using state = std::vector<grammar_matcher::stack>;
  const grammar& g = m.rules();
  vocab_->trie.allowed(
      [&g](const state& from, unsigned char b) -> std::optional<state> {
        state to;
        if (!grammar_matcher::step(g, from, b, to)) return std::nullopt;
        return to;
      },
      m.stacks(), mask);
  if (m.complete())
    for (std::int32_t e : vocab_->eos)
      if (e >= 0 && std::size_t(e) < mask.size()) mask.set(std::size_t(e));
  return mask;
}

std::shared_ptr<const token_mask> masks::of(const grammar_matcher& m) {
  std::string key = m.key();
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    ++stats_.misses;
  }
  auto mask = std::make_shared<const token_mask>(compute(m));  // outside the lock: other sequences go on
  std::lock_guard lock(mu_);
  if (index_.count(key)) return mask;  // computed twice at once: either copy is right
  lru_.emplace_front(key, mask);
  index_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return mask;
}

masks::counters masks::stats() const {
  std::lock_guard lock(mu_);
  counters c = stats_;
  c.entries = lru_.size();
  return c;
}

}  // namespace troupe::structured
