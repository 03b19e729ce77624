// Seconds since the Unix epoch: what timestamps read by clients and operators carry (admin
// events, `created`, log lines, KV-store expiry). Durations use steady_clock instead.
#pragma once
#include <chrono>

namespace troupe {

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace troupe
