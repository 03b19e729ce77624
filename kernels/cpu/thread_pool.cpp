#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace troupe::kernels {
namespace {

thread_local bool inside_task = false;

// Workers sleep on `epoch_` (C++20 atomic wait) between jobs; a job is published by bumping it.
// Spinning before sleeping keeps per-layer fan-out cheap during decode. The spin is timed, not
// counted: the serial work between two kernels of a decode step (SwiGLU over a 5632-wide row
// takes 13 us) outlasted the old 20,000 loads (about 6 us), so every down_proj started on one
// thread while the other woke from a futex, 11% slower in a step. After 200 us without a job
// (a step has ended) workers sleep.
constexpr auto spin_before_sleep = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class pool {
 public:
  explicit pool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~pool() {
    stop_.store(true);
    epoch_.fetch_add(1);
    epoch_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void run(std::size_t n, const std::function<void(std::size_t)>& fn) {
    std::lock_guard<std::mutex> lock(submit_);  // one job at a time
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    busy_.store(static_cast<int>(workers_.size()));
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    drain();
    while (busy_.load(std::memory_order_acquire) != 0) {
      // Workers finish within one task; spinning is cheaper than a futex round trip here.
      std::this_thread::yield();
    }
  }

 private:
  void drain() {
    inside_task = true;
    for (;;) {
      std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_) break;
      (*fn_)(i);
    }
    inside_task = false;
  }

  void work() {
    unsigned seen = 0;
    for (;;) {
      unsigned e = epoch_.load(std::memory_order_acquire);
      const auto until = std::chrono::steady_clock::now() + spin_before_sleep;
      while (e == seen) {
        for (int i = 0; i < 64 && e == seen; ++i) {
          cpu_relax();
          e = epoch_.load(std::memory_order_acquire);
        }
        if (std::chrono::steady_clock::now() > until) break;
      }
      if (e == seen) {
        epoch_.wait(seen, std::memory_order_acquire);
        continue;
      }
      seen = e;
      if (stop_.load()) return;
      drain();
      busy_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex submit_;
  std::atomic<unsigned> epoch_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> next_{0};
  std::atomic<int> busy_{0};
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0;
};

pool& the_pool() {
  static pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("TROUPE_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return n;
}

std::vector<std::size_t> stream_split(std::size_t n, std::size_t unit) {
  const std::size_t units = (n + unit - 1) / unit, threads = std::size_t(num_threads());
  // Ends in tenths of the work per thread: the long runs end at 8, 16, ... of 10T, the short
  // ones at 8T + 1, ..., 10T. The last end is all the units; empty runs are dropped.
  const std::size_t whole = 10 * threads;
  std::vector<std::size_t> cut{0};
  auto add = [&](std::size_t tenths) {
    const std::size_t end = std::min(n, units * tenths / whole * unit);
    if (end > cut.back()) cut.push_back(end);
  };
  for (std::size_t t = 1; t <= threads; ++t) add(8 * t);
  for (std::size_t s = 1; s <= 2 * threads; ++s) add(8 * threads + s);
  return cut;
}

void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || inside_task || num_threads() == 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  the_pool().run(n, fn);
}

on_this_thread::on_this_thread() : was_(inside_task) { inside_task = true; }
on_this_thread::~on_this_thread() { inside_task = was_; }

}  // namespace troupe::kernels
