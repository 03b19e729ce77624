#include "runtime/supervision/restart_policy.h"

#include <algorithm>

namespace troupe::supervision {

restart_decision restart_history::on_death(const restart_policy& p, clock::time_point now) {
  while (!recent_.empty() && now - recent_.front() >= p.period) recent_.pop_front();
  if (recent_.empty()) pauses_in_a_row_ = 0;  // a whole period without a death
  restart_decision d;
  d.recent = int(recent_.size());
  ++total_;
  if (d.recent >= p.max_restarts) {
    d.paused = true;
    auto pause = p.pause;
    for (int i = 0; i < pauses_in_a_row_ && pause < p.max_pause; ++i) pause *= 2;
    d.delay = std::min(pause, p.max_pause);
    ++pauses_in_a_row_;
    recent_.clear();
    recent_.push_back(now + d.delay);  // the restart after the pause opens the next period
    return d;
  }
  auto delay = p.first_delay;
  for (int i = 0; i < d.recent && delay < p.max_delay; ++i) delay *= 2;
  d.delay = std::min(delay, p.max_delay);
  recent_.push_back(now);
  return d;
}

}  // namespace troupe::supervision
