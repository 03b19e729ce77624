// A replica's stream of prefix-cache events to its subscribers (routers, through their KV-event
// subscription): who follows it, as which replica, and where the stream stands. Batches are
// numbered 1, 2, ... within a generation; a cache reset (the KV was lost) starts a new
// generation at the all-cleared event, and a restarted replica starts from a larger one (its
// spawn time), so a subscriber tells a gap or a new life from the numbers alone. Pure: the
// scheduler sends the batches this returns to the sinks it lists.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/kv/kv_events.h"

namespace troupe::kv {

template <class Sink>
class event_stream {
 public:
  explicit event_stream(std::uint64_t generation = 0) : generation_(generation) {}

  // `s` follows the stream from now on, as replica `r` (once): true if it is new.
  bool subscribe(replica_id r, const Sink& s) {
    replica_ = r;
    if (std::find(sinks_.begin(), sinks_.end(), s) != sinks_.end()) return false;
    sinks_.push_back(s);
    return true;
  }

  // Drops the subscribers `gone` picks; how many went.
  template <class Pred>
  std::size_t drop_if(Pred gone) {
    const std::size_t before = sinks_.size();
    sinks_.erase(std::remove_if(sinks_.begin(), sinks_.end(), gone), sinks_.end());
    return before - sinks_.size();
  }

  // One step's events as numbered batches, split where the cache was cleared; none without
  // subscribers (nobody is owed the numbers).
  std::vector<kv_event_batch> batches(std::vector<kv_event> events, double now, kernels::dtype kv_type) {
    std::vector<kv_event_batch> out;
    if (events.empty() || sinks_.empty()) return out;
    std::vector<kv_event> part;
    auto cut = [&] {
      if (!part.empty()) out.push_back({replica_, generation_, ++seq_, now, std::move(part), kv_type});
      part.clear();
    };
    for (auto& e : events) {
      if (e.kind == kv_event_kind::cleared) {
        cut();
        ++generation_;
        seq_ = 0;
      }
      part.push_back(std::move(e));
    }
    cut();
    return out;
  }

  const std::vector<Sink>& sinks() const { return sinks_; }
  std::uint64_t generation() const { return generation_; }
  std::uint64_t seq() const { return seq_; }  // the last batch's number in this generation

 private:
  std::vector<Sink> sinks_;
  replica_id replica_;
  std::uint64_t generation_ = 0, seq_ = 0;
};

}  // namespace troupe::kv
