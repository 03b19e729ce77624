// SIGINT/SIGTERM for the long-running commands (serve, node). Construct before any thread
// starts: the signals are blocked in every thread and one thread of this class waits for them.
// A signal before wait_for_stop() is reached (a model still loading) ends the process at once;
// a signal while serving returns from wait_for_stop() so the caller stops in order, and the
// process then ends by itself if stopping takes longer than `grace` or a second signal comes
// (more than 2 s after the first: Ctrl-C reaches a launch's whole process group, and launch
// passes SIGTERM on, which is one stop, not two).
#pragma once
#include <chrono>

namespace troupe::cli {

class stop_signals {
 public:
  explicit stop_signals(std::chrono::seconds grace = std::chrono::seconds(10));
  ~stop_signals();
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  // Blocks until SIGINT or SIGTERM (returns the signal) or request_stop() (returns 0).
  int wait_for_stop();
  // Wakes wait_for_stop() without a signal (the work it waits beside ended by itself).
  void request_stop();
  // How long stopping in order may take once a signal came (e.g. a head's shutdown grace).
  void set_grace(std::chrono::seconds grace);

 private:
  struct impl;
  impl* p_;
};

}  // namespace troupe::cli
