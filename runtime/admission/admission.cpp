#include "runtime/admission/admission.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace troupe::admission {

namespace {

double clamp_wait(double s) { return std::clamp(std::ceil(s), 1.0, 60.0); }

constexpr double rate_weight = 0.2;  // EWMA weight of the newest start interval

}  // namespace

int queue_limit(const admission_config& cfg, int priority) {
  if (cfg.max_queued <= 0) return 0;
  const double share = priority <= 0 ? 1.0 : std::max(cfg.min_share, 1.0 - cfg.priority_step * priority);
  return std::max(1, int(std::floor(cfg.max_queued * share)));
}

verdict pool_queue::admit(const admission_config& cfg, int priority, clock::time_point) const {
  if (cfg.max_queued <= 0) return {};
  const int limit = queue_limit(cfg, priority);
  if (depth_ < limit) return {};
  verdict v;
  v.admitted = false;
  const double excess = double(depth_ - limit + 1);
  v.retry_after_s = clamp_wait(rate_ > 0 ? excess / rate_ : cfg.fallback_retry_after_s);
  v.reason = "the queue holds " + std::to_string(depth_) + " requests, " + std::to_string(limit) + " for priority " +
             std::to_string(priority);
  return v;
}

void recent_rate::add(clock::time_point now) {
  if (last_) decayed_ *= std::exp(-std::max(0.0, std::chrono::duration<double>(now - *last_).count()) / window);
  decayed_ += 1;
  last_ = now;
}

std::optional<double> recent_rate::per_second(clock::time_point since, clock::time_point now) const {
  const double seen = std::chrono::duration<double>(now - since).count();
  if (seen < min_seen) return std::nullopt;
  if (!last_) return 0.0;
  const double ago = std::max(0.0, std::chrono::duration<double>(now - *last_).count());
  // Over a history shorter than the window the decayed count covers only part of it.
  return decayed_ * std::exp(-ago / window) / (window * (1 - std::exp(-seen / window)));
}

void pool_queue::started(clock::time_point now) {
  left();
  ++running_;
  if (const auto last = starts_.last()) {
    const double gap = std::chrono::duration<double>(now - *last).count();
    const double r = 1.0 / std::max(1e-3, gap);
    rate_ = rate_ == 0 ? r : (1 - rate_weight) * rate_ + rate_weight * r;
  } else {
    first_start_ = now;
  }
  starts_.add(now);
}

void pool_queue::finished(clock::time_point now) {
  if (running_ > 0) --running_;
  finishes_.add(now);
}

std::optional<double> pool_queue::recent_start_rate(clock::time_point now) const {
  if (!first_start_) return std::nullopt;
  return starts_.per_second(*first_start_, now);
}

void pool_queue::first_token(std::optional<double> predicted_wait, double ttft) {
  if (!predicted_wait) return;
  const double beyond = ttft - *predicted_wait;
  if (!service_mean_) {  // as TCP starts its round-trip estimate (RFC 6298): one sample, half of it as deviation
    service_mean_ = beyond;
    service_dev_ = std::abs(beyond) / 2;
    return;
  }
  service_dev_ = (1 - rate_weight) * service_dev_ + rate_weight * std::abs(beyond - *service_mean_);
  service_mean_ = (1 - rate_weight) * *service_mean_ + rate_weight * beyond;
}

std::optional<double> pool_queue::service_s() const {
  if (!service_mean_) return std::nullopt;
  return std::max(0.0, *service_mean_ + 2 * service_dev_);
}

std::optional<double> pool_queue::recent_finish_rate(clock::time_point now) const {
  if (!first_start_) return std::nullopt;
  return finishes_.per_second(*first_start_, now);
}

verdict tenant_budgets::charge(const admission_config& cfg, const std::string& key, const std::string& tenant, double tokens,
                              clock::time_point now) {
  auto limits_it = cfg.tenants.find(tenant);
  if (limits_it == cfg.tenants.end()) limits_it = cfg.tenants.find("default");
  if (limits_it == cfg.tenants.end()) return {};
  const tenant_limits& lim = limits_it->second;
  if (lim.requests_per_second <= 0 && lim.tokens_per_minute <= 0) return {};
  const double req_cap = lim.burst_requests > 0 ? lim.burst_requests : std::max(1.0, lim.requests_per_second);
  const double tok_cap = lim.tokens_per_minute;
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= cfg.max_tracked_tenants && !lru_.empty()) {  // bounded: forget the least recent
      buckets_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(key);
    it = buckets_.emplace(key, bucket{req_cap, tok_cap, now, lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  bucket& b = it->second;
  const double dt = std::max(0.0, std::chrono::duration<double>(now - b.at).count());
  b.at = now;
  if (lim.requests_per_second > 0) b.requests = std::min(req_cap, b.requests + dt * lim.requests_per_second);
  if (tok_cap > 0) b.tokens = std::min(tok_cap, b.tokens + dt * tok_cap / 60.0);
  verdict v;
  if (lim.requests_per_second > 0 && b.requests < 1) {
    v.admitted = false;
    v.retry_after_s = clamp_wait((1 - b.requests) / lim.requests_per_second);
    v.reason = "tenant '" + tenant + "' is over its " + std::to_string(lim.requests_per_second) + " requests per second";
    return v;
  }
  if (tok_cap > 0 && b.tokens < tokens) {
    v.admitted = false;
    v.reason = tokens > tok_cap ? "the request's " + std::to_string(long(tokens)) + " tokens exceed tenant '" + tenant +
                                      "''s budget of " + std::to_string(long(tok_cap)) + " tokens per minute"
                                : "tenant '" + tenant + "' is over its " + std::to_string(long(tok_cap)) + " tokens per minute";
    v.retry_after_s = clamp_wait((std::min(tokens, tok_cap) - b.tokens) / (tok_cap / 60.0));
    return v;
  }
  if (lim.requests_per_second > 0) b.requests -= 1;
  if (tok_cap > 0) b.tokens -= tokens;
  return {};
}

std::string overload_message(const verdict& v) {
  return "overloaded (retry after " + std::to_string(long(v.retry_after_s)) + " s): " + v.reason;
}

std::optional<double> retry_after_of(const std::string& message) {
  const std::string prefix = "overloaded (retry after ";
  const auto at = message.find(prefix);
  if (at == std::string::npos) return std::nullopt;
  try {
    return std::stod(message.substr(at + prefix.size()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace troupe::admission
