// Where a forward pass spends its time, op by op. Off unless enabled (one branch per op when
// off); `troupe bench engine --profile` turns it on and prints the breakdown. The ranks of a
// tensor-parallel group add to the same totals from their threads: thread-seconds, not wall time.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <string>

namespace troupe::model {

enum class op { embed, rmsnorm, qkv_proj, rope, kv_write, attention, o_proj, gate_up_proj, swiglu, down_proj, residual, lm_head,
                all_reduce, all_gather, all_to_all, moe_route, count };

class op_profile {
 public:
  static void enable(bool on);
  static bool enabled() { return on_; }
  static void add(op o, double seconds) { totals_[std::size_t(o)].fetch_add(seconds, std::memory_order_relaxed); }
  static void reset() {
    for (auto& t : totals_) t.store(0.0);
  }
  static double seconds(op o) { return totals_[std::size_t(o)].load(); }
  // "name ms (share%)" for every op that took time, largest first.
  static std::string report();

 private:
  static inline bool on_ = false;
  static inline std::array<std::atomic<double>, std::size_t(op::count)> totals_{};
};

// Adds the lifetime of the scope to an op when profiling is on.
class op_timer {
 public:
  explicit op_timer(op o) : op_(o), on_(op_profile::enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  // Adds only what it timed: profiling switched on by another thread meanwhile adds nothing.
  ~op_timer() {
    if (on_) op_profile::add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  op op_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace troupe::model
