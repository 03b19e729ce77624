// The autoscaler's policy, pure: from one pool's signals now, how many replicas it should run.
// Signals are queue depth per serving replica, KV use, and time to first token and between
// tokens against their SLOs; a pool goes down only when one replica fewer could hold what runs. Hysteresis twice over: separate thresholds up and down, and a signal must hold for
// up_for (down_for) before it acts; after any action the pool waits `cooldown`. Up grows by half
// the serving count (at least one), down shrinks by one: scaling up fast under a spike, down
// slowly once quiet, within [min, max].
#pragma once
#include <chrono>
#include <optional>
#include <string>

namespace troupe::autoscale {

using clock = std::chrono::steady_clock;

struct autoscale_config {
  bool enabled = false;
  std::chrono::milliseconds interval{1000};    // how often the autoscaler looks
  double queue_up = 4, queue_down = 0.5;       // waiting requests per serving replica
  double kv_up = 0.85, kv_down = 0.30;         // mean KV use of the serving replicas (0 to 1)
  // Down only if the sequences running now would fill at most this share of one replica fewer's
  // batch slots: a pool busy without a queue is not quiet, so it does not shrink into one.
  double busy_down = 0.6;
  double ttft_slo_s = 0;                       // 0: not a signal; above it: up; below half: may go down
  double itl_slo_s = 0;                        // time between tokens, likewise
  std::chrono::milliseconds up_for{2000}, down_for{30000}, cooldown{10000};
};

struct pool_signals {
  int serving = 0;  // replicas placed on now
  int warm = 0;     // started and parked: what scaling up takes first (not a signal; for reports)
  int min = 1, max = 1;
  double waiting = 0;    // requests queued on the serving replicas
  double running = 0;    // sequences running on them
  int slots = 0;         // sequences one replica runs at once (0: unknown, not a signal)
  double kv_usage = 0;   // mean over the serving replicas
  double ttft_s = 0;     // recent time to first token (0: none measured lately)
  double itl_s = 0;      // recent time between output tokens (0: none measured lately)
};

// What the policy remembers of a pool between looks.
struct pool_memory {
  std::optional<clock::time_point> up_since, down_since, last_action;
};

struct decision {
  int target = 0;      // replicas to run; == serving: hold
  std::string reason;  // why, for the log and `watch`
};

decision decide(const autoscale_config& cfg, const pool_signals& s, pool_memory& m, clock::time_point now);

}  // namespace troupe::autoscale
