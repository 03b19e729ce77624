#include "runtime/admission/model_fallback.h"

#include <cstdio>

namespace troupe::admission {

std::optional<double> predicted_wait_s(const pool_queue& q, clock::time_point now) {
  const auto rate = q.recent_start_rate(now);
  if (!rate) return std::nullopt;
  if (*rate <= 0) return q.depth() > 0 ? std::optional<double>(1e9) : std::optional<double>(0.0);  // nothing starts
  return double(q.depth()) / *rate;
}

fallback_decision decide_fallback(const fallback_rule& rule, bool allowed, int priority, const verdict& v,
                                  std::optional<double> wait_s) {
  if (rule.to.empty() || !allowed || priority < rule.min_priority) return {};
  if (!v.admitted) return {true, "the queue is full: " + v.reason};
  if (rule.max_queue_wait_s > 0 && wait_s && *wait_s > rule.max_queue_wait_s) {
    char why[128];
    std::snprintf(why, sizeof why, "predicted queue wait %.3f s is over the %.3f s target", *wait_s, rule.max_queue_wait_s);
    return {true, why};
  }
  return {};
}

}  // namespace troupe::admission
