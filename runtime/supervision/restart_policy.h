// When a supervisor restarts a child that died, and when it stops trying: Erlang/OTP's restart
// intensity (at most `max_restarts` restarts within `period`; the death after that is final),
// with an exponential backoff between restarts so that a child dying at start does not spin.
// Node agents supervise their replicas with it, `troupe launch` its processes. Pure.
#pragma once
#include <chrono>
#include <deque>

namespace troupe::supervision {

struct restart_policy {
  int max_restarts = 5;                          // within `period`; the next death gives up
  std::chrono::milliseconds period{60000};
  std::chrono::milliseconds first_delay{500};    // before the first restart in a period
  std::chrono::milliseconds max_delay{30000};    // the backoff doubles up to this
};

struct restart_decision {
  bool give_up = false;
  std::chrono::milliseconds delay{0};  // restart after this long (when not giving up)
  int recent = 0;                      // restarts within the period before this death
};

// One child's restarts. on_death() at each death, in time order.
class restart_history {
 public:
  using clock = std::chrono::steady_clock;
  // A restart (recorded as made now) after first_delay * 2^recent, capped at max_delay; or,
  // with max_restarts restarts already within the period, give_up (nothing recorded).
  restart_decision on_death(const restart_policy& p, clock::time_point now);
  int restarts() const { return total_; }  // every restart decided so far

 private:
  std::deque<clock::time_point> recent_;
  int total_ = 0;
};

}  // namespace troupe::supervision
