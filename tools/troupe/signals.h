// SIGINT/SIGTERM for the long-running commands (serve, node). Construct before any thread
// starts: the signals are blocked in every thread and one thread of this class waits for them.
// A signal before wait_for_stop() is reached (a model still loading) ends the process at once;
// a signal while serving returns from wait_for_stop() so the caller stops in order, and the
// process then ends by itself if stopping takes longer than `grace` or a second signal comes.
#pragma once
#include <chrono>

namespace troupe::cli {

class stop_signals {
 public:
  explicit stop_signals(std::chrono::seconds grace = std::chrono::seconds(10));
  ~stop_signals();
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  // Blocks until SIGINT or SIGTERM; returns the signal.
  int wait_for_stop();

 private:
  struct impl;
  impl* p_;
};

}  // namespace troupe::cli
