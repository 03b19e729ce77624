#include "runtime/supervision/restart_policy.h"

#include <algorithm>

namespace troupe::supervision {

restart_decision restart_history::on_death(const restart_policy& p, clock::time_point now) {
  while (!recent_.empty() && now - recent_.front() >= p.period) recent_.pop_front();
  restart_decision d;
  d.recent = int(recent_.size());
  if (d.recent >= p.max_restarts) {
    d.give_up = true;
    return d;
  }
  auto delay = p.first_delay;
  for (int i = 0; i < d.recent && delay < p.max_delay; ++i) delay *= 2;
  d.delay = std::min(delay, p.max_delay);
  recent_.push_back(now);
  ++total_;
  return d;
}

}  // namespace troupe::supervision
