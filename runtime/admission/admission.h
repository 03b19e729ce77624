// Admission control, as pure policy: who may start now and, when not, how long to wait.
//  - A bounded queue per pool: requests accepted but not yet started (no first token). A
//    request of priority p (lower is more important, as the scheduler orders them) may fill the
//    queue only up to max_queued * share(p), share(p) = max(min_share, 1 - step * p) for p > 0
//    and 1 otherwise, so under overload the least important are refused first and an accepted
//    request is never dropped to make room.
//  - Token buckets per tenant: requests per second and tokens (prompt + max_tokens) per minute.
// A refusal carries the seconds to wait: for a full queue, the queue's excess over what this
// priority may use divided by the pool's measured drain rate (requests started per second); for
// a tenant, the time its bucket takes to hold the request.
#pragma once
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace troupe::admission {

using clock = std::chrono::steady_clock;

struct tenant_limits {
  double requests_per_second = 0;  // 0: no limit
  double burst_requests = 0;       // bucket size; 0: one second's worth (at least 1)
  double tokens_per_minute = 0;    // 0: no limit; the bucket holds one minute's worth
};

struct admission_config {
  int max_queued = 0;          // per pool; 0: no queue bound
  double priority_step = 0.25;
  double min_share = 0.25;
  // Limits by tenant name; "default" applies to every tenant without its own entry.
  std::map<std::string, tenant_limits> tenants;
  std::size_t max_tracked_tenants = 4096;  // buckets kept (least recently used go first)
  double fallback_retry_after_s = 1;        // before a drain rate is measured
  bool enabled() const { return max_queued > 0 || !tenants.empty(); }
};

struct verdict {
  bool admitted = true;
  double retry_after_s = 0;  // when refused: whole seconds, 1 to 60
  std::string reason;
};

// How much of a pool's queue a request of `priority` may fill.
int queue_limit(const admission_config& cfg, int priority);

// Events per second over about the last `window` seconds, as an exponentially decayed count:
// unlike an EWMA of intervals, a step that starts many requests at once does not read as a
// rate of thousands. Measured from `since` on (the first start of the pool's queue): none
// before min_seen seconds of it, and zero when nothing happened since.
class recent_rate {
 public:
  void add(clock::time_point now);
  std::optional<double> per_second(clock::time_point since, clock::time_point now) const;
  std::optional<clock::time_point> last() const { return last_; }
  static constexpr double window = 2.0, min_seen = 0.25;

 private:
  std::optional<clock::time_point> last_;
  double decayed_ = 0;  // sum over events at t of exp(-(last_ - t) / window)
};

// One pool's queue: its depth (the caller counts acceptances and starts) and its drain rate;
// and, once started, the requests it runs until they end, with the rate at which they end: a
// pool whose sequence slots are all taken starts the next request only when one ends.
class pool_queue {
 public:
  verdict admit(const admission_config& cfg, int priority, clock::time_point now) const;
  void accepted() { ++depth_; }
  // A queued request started (its first token; it runs in the pool from now) or left before starting.
  void started(clock::time_point now);
  void left() {
    if (depth_ > 0) --depth_;
  }
  // A request that started elsewhere runs here now (migrated, or handed off after its prefill).
  void joined() { ++running_; }
  // A running request freed its slot: it ended (or went on elsewhere) on a live replica.
  void finished(clock::time_point now);
  // A running request's replica died: its slot is gone with it, nothing ended there.
  void lost() {
    if (running_ > 0) --running_;
  }
  int depth() const { return depth_; }
  int running() const { return running_; }
  double drain_rate() const { return rate_; }  // requests started per second (EWMA)
  // Requests started, and ended, per second lately (recent_rate); none until min_seen seconds
  // after the first start.
  std::optional<double> recent_start_rate(clock::time_point now) const;
  std::optional<double> recent_finish_rate(clock::time_point now) const;
  // A request admitted with `predicted_wait` seconds of queue wait had its first token `ttft`
  // seconds after it came: what the queue wait leaves out (its own prefill, cores the pool
  // shares) is learnt from the difference. One admitted without a prediction teaches nothing.
  void first_token(std::optional<double> predicted_wait, double ttft);
  // The time to first token beyond the predicted queue wait, as a request rarely exceeds it
  // (recent mean plus twice the mean deviation); none before a first token.
  std::optional<double> service_s() const;

 private:
  int depth_ = 0, running_ = 0;
  std::optional<double> service_mean_;
  double service_dev_ = 0;
  double rate_ = 0;
  std::optional<clock::time_point> first_start_;
  recent_rate starts_, finishes_;
};

// Token buckets per tenant, bounded (least recently used tenants are forgotten).
class tenant_budgets {
 public:
  // Charges one request of `tokens` to the bucket `key` under the limits configured for
  // `tenant` (or "default"), or refuses it naming the limit. Keys keep tenants apart that share
  // limits: each `user` of the API has a bucket of its own under the default limits.
  verdict charge(const admission_config& cfg, const std::string& key, const std::string& tenant, double tokens,
                 clock::time_point now);
  std::size_t tracked() const { return buckets_.size(); }

 private:
  struct bucket {
    double requests = 0, tokens = 0;
    clock::time_point at;
    std::list<std::string>::iterator lru;
  };
  std::unordered_map<std::string, bucket> buckets_;
  std::list<std::string> lru_;  // most recent first
};

// "overloaded (retry after N s): why": the text an overload refusal travels as between actors,
// and its reading back (nullopt for any other text).
std::string overload_message(const verdict& v);
std::optional<double> retry_after_of(const std::string& message);

}  // namespace troupe::admission
