// When a supervisor restarts a child that died: Erlang/OTP's restart intensity (at most
// `max_restarts` restarts within `period`), with an exponential backoff between restarts so that
// a child dying at start does not spin. Past the intensity an OTP supervisor escalates to its
// parent; these supervisors have none above them that could do better, and giving up for good
// left a node down for ever while /health said 200. So they pause instead (`pause`, doubling for
// each pause in a row up to `max_pause`) and then try again with a fresh count. Node agents
// supervise their replicas with it, `troupe launch` its processes. Pure.
#pragma once
#include <chrono>
#include <deque>

namespace troupe::supervision {

struct restart_policy {
  int max_restarts = 5;                          // within `period`; the next death gives up
  std::chrono::milliseconds period{60000};
  std::chrono::milliseconds first_delay{500};    // before the first restart in a period
  std::chrono::milliseconds max_delay{30000};    // the backoff doubles up to this
  std::chrono::milliseconds pause{60000};        // past the intensity: the wait before trying again
  std::chrono::milliseconds max_pause{600000};   // the pause doubles (pauses in a row) up to this
};

struct restart_decision {
  bool paused = false;                 // past the intensity: `delay` is a pause, after which the count starts afresh
  std::chrono::milliseconds delay{0};  // restart after this long
  int recent = 0;                      // restarts within the period before this death
};

// One child's restarts. on_death() at each death, in time order.
class restart_history {
 public:
  using clock = std::chrono::steady_clock;
  // A restart (recorded as made now) after first_delay * 2^recent, capped at max_delay; or,
  // with max_restarts restarts already within the period, a pause of pause * 2^(pauses in a
  // row), capped at max_pause, after which the period's count is empty. A death after a whole
  // period without one ends a row of pauses.
  restart_decision on_death(const restart_policy& p, clock::time_point now);
  int restarts() const { return total_; }  // every restart decided so far (pauses included)

 private:
  std::deque<clock::time_point> recent_;
  int total_ = 0;
  int pauses_in_a_row_ = 0;
};

}  // namespace troupe::supervision
