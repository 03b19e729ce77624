// Where a forward pass spends its time, op by op. Off unless enabled (one branch per op when
// off); `troupe bench engine --profile` turns it on and prints the breakdown.
#pragma once
#include <array>
#include <chrono>
#include <string>

namespace troupe::model {

enum class op { embed, rmsnorm, qkv_proj, rope, kv_write, attention, o_proj, gate_up_proj, swiglu, down_proj, residual, lm_head, count };

class op_profile {
 public:
  static void enable(bool on);
  static bool enabled() { return on_; }
  static void add(op o, double seconds) { totals_[std::size_t(o)] += seconds; }
  static void reset() { totals_.fill(0.0); }
  // "name ms (share%)" for every op that took time, largest first.
  static std::string report();

 private:
  static inline bool on_ = false;
  static inline std::array<double, std::size_t(op::count)> totals_{};
};

// Adds the lifetime of the scope to an op when profiling is on.
class op_timer {
 public:
  explicit op_timer(op o) : op_(o) {
    if (op_profile::enabled()) t0_ = std::chrono::steady_clock::now();
  }
  ~op_timer() {
    if (op_profile::enabled())
      op_profile::add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  op op_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace troupe::model
