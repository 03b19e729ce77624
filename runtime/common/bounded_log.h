// A record of the most recent events, bounded: when it holds `capacity`, the older half goes at
// once (amortised O(1) per event, and what remains is still in order). Nothing a client does
// can grow it past `capacity`.
#pragma once
#include <cstddef>
#include <vector>

namespace troupe {

template <class T>
class bounded_log {
 public:
  explicit bounded_log(std::size_t capacity) : capacity_(capacity < 2 ? 2 : capacity) {}
  void push(T x) {
    if (items_.size() >= capacity_) items_.erase(items_.begin(), items_.begin() + std::ptrdiff_t(capacity_ / 2));
    items_.push_back(std::move(x));
  }
  const std::vector<T>& items() const { return items_; }
  std::size_t capacity() const { return capacity_; }

 private:
  std::size_t capacity_;
  std::vector<T> items_;
};

}  // namespace troupe
