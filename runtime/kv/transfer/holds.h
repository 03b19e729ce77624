// KV handed out for a receiver to pull (a prefill replica's handoff, a store's lookup): held
// until the receiver releases it or its hold expires; the receiver's claim before it pulls
// restarts the hold. Every start gets a number, so the timer of a superseded hold is told from
// the current one. The holder's actor arms a timer with the number start/claim return.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace troupe::kv::transfer {

class hold_book {
 public:
  // Holds `id` from now (again, if it was held).
  std::uint64_t start(const std::string& id) { return holds_[id] = ++next_; }
  // Restarts the hold of `id` if it is held.
  std::optional<std::uint64_t> claim(const std::string& id) {
    auto it = holds_.find(id);
    if (it == holds_.end()) return std::nullopt;
    return it->second = ++next_;
  }
  // Forgets `id`; false if it was not held.
  bool release(const std::string& id) { return holds_.erase(id) > 0; }
  // The timer of hold `n` of `id` fired: true (and `id` forgotten) if that is its current hold.
  bool expire(const std::string& id, std::uint64_t n) {
    auto it = holds_.find(id);
    if (it == holds_.end() || it->second != n) return false;
    holds_.erase(it);
    return true;
  }

 private:
  std::map<std::string, std::uint64_t> holds_;
  std::uint64_t next_ = 0;
};

}  // namespace troupe::kv::transfer
