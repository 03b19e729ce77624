#include "tools/troupe/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace troupe::cli {

struct stop_signals::impl {
  sigset_t set;
  std::chrono::seconds grace;
  std::mutex mu;
  std::condition_variable cv;
  bool waiting = false;  // main is in wait_for_stop(): serving
  int received = 0;
  bool requested = false;  // request_stop()
  std::chrono::steady_clock::time_point first_at;  // when the stopping signal came
  std::thread waiter;

  void run() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      std::unique_lock<std::mutex> lock(mu);
      // The same stop twice within 2 s is one stop: Ctrl-C reaches a launch's whole process
      // group, then launch passes SIGTERM on to its processes.
      if (received && std::chrono::steady_clock::now() - first_at < std::chrono::seconds(2)) continue;
      if (!waiting || received) {  // still starting, or a second signal: nothing to stop in order
        std::fprintf(stderr, "troupe: signal %d, exiting now\n", sig);
        ::_exit(128 + sig);
      }
      received = sig;
      first_at = std::chrono::steady_clock::now();
      cv.notify_all();
      const auto g = grace;
      lock.unlock();
      std::thread([g] {  // the deadline for stopping in order
        std::this_thread::sleep_for(g);
        std::fprintf(stderr, "troupe: still stopping after %llds, exiting now\n", (long long)g.count());
        ::_exit(1);
      }).detach();
    }
  }
};

stop_signals::stop_signals(std::chrono::seconds grace) : p_(new impl) {
  sigemptyset(&p_->set);
  sigaddset(&p_->set, SIGINT);
  sigaddset(&p_->set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &p_->set, nullptr);
  p_->grace = grace;
  p_->waiter = std::thread([this] { p_->run(); });
  p_->waiter.detach();  // lives until the process ends; it only ever waits for signals
}

stop_signals::~stop_signals() {}  // the waiter thread keeps `p_` until the process ends

int stop_signals::wait_for_stop() {
  std::unique_lock<std::mutex> lock(p_->mu);
  p_->waiting = true;
  p_->cv.wait(lock, [this] { return p_->received != 0 || p_->requested; });
  return p_->received;
}

void stop_signals::request_stop() {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->requested = true;
  p_->cv.notify_all();
}

void stop_signals::set_grace(std::chrono::seconds grace) {
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->grace = grace;
}

}  // namespace troupe::cli
