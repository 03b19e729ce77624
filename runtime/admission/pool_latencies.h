// Each pool's recent latency as its request owner sees it: exponential averages of the time to
// the first token and between tokens of requests that ran whole on one replica of the pool (a
// migrated request's figures say more about the failure than about the pool). The autoscaler
// and the console read them with their age, so a pool that served nothing lately shows it.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::admission {

// A pool's figures now: the averages, and how long ago each last changed (a quiet pool's
// figures grow old instead of dropping to zero). 0 and a negative age: not measured yet.
struct pool_latency {
  std::string pool;
  double ttft_s = 0, itl_s = 0;
  double ttft_age_s = -1, itl_age_s = -1;
};

class pool_latencies {
 public:
  using clock = std::chrono::steady_clock;

  void first_token(const std::string& pool, double ttft_s, clock::time_point now) { observe(pools_[pool].ttft, ttft_s, now); }
  void between_tokens(const std::string& pool, double itl_s, clock::time_point now) { observe(pools_[pool].itl, itl_s, now); }

  std::vector<pool_latency> at(clock::time_point now) const;

 private:
  struct average {
    double value = 0;
    std::optional<clock::time_point> at;
  };
  struct pool {
    average ttft, itl;
  };
  // The first sample is the average; each later one weighs a fifth.
  static void observe(average& a, double sample, clock::time_point now) {
    a.value = a.at ? 0.8 * a.value + 0.2 * sample : sample;
    a.at = now;
  }
  std::map<std::string, pool> pools_;  // the topology's pools only
};

}  // namespace troupe::admission
