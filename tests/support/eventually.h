// Waiting in a test for a cluster to reach a state, one phase at a time: each wait has its own
// limit, so a slow earlier phase on a busy machine never eats a later one's time.
#pragma once
#include <chrono>
#include <functional>
#include <thread>

namespace troupe::test {

// Asks `done` until it holds or `limit` passes; whether it held. `pace` spaces the questions (it
// is not a wait for anything: each question looks at the state afresh).
inline bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(60),
                       std::chrono::milliseconds pace = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(pace);
  }
}

}  // namespace troupe::test
