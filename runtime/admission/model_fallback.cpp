#include "runtime/admission/model_fallback.h"

#include <algorithm>
#include <cstdio>

namespace troupe::admission {

namespace {

constexpr double endless = 1e9;  // seconds: nothing moves

std::optional<double> over(double n, std::optional<double> rate) {
  if (!rate) return std::nullopt;
  if (*rate <= 0) return n > 0 ? endless : 0.0;
  return n / *rate;
}

}  // namespace

std::optional<double> predicted_wait_s(const pool_queue& q, int slots, clock::time_point now) {
  std::optional<double> wait = q.depth() == 0 ? 0.0 : over(q.depth(), q.recent_start_rate(now));
  const int must_end = q.depth() + q.running() - slots + 1;  // this request needs a slot too
  if (slots > 0 && must_end > 0)
    if (const auto w = over(must_end, q.recent_finish_rate(now))) wait = std::max(wait.value_or(0), *w);
  return wait;
}

first_token_prediction predict_first_token(const pool_queue& q, int slots, clock::time_point now) {
  first_token_prediction p{predicted_wait_s(q, slots, now), q.service_s()};
  if (!q.recent_start_rate(now) && p.service) p.wait = std::max(p.wait.value_or(0), q.depth() * *p.service);
  return p;
}

fallback_decision decide_fallback(const fallback_rule& rule, bool allowed, int priority, const verdict& v,
                                  std::optional<double> ttft_s) {
  if (rule.to.empty() || !allowed || priority < rule.min_priority) return {};
  if (!v.admitted) return {true, "the queue is full: " + v.reason};
  if (rule.max_queue_wait_s > 0 && ttft_s && *ttft_s > rule.max_queue_wait_s) {
    char why[128];
    std::snprintf(why, sizeof why, "predicted time to first token %.3f s is over the %.3f s target", *ttft_s,
                  rule.max_queue_wait_s);
    return {true, why};
  }
  return {};
}

}  // namespace troupe::admission
