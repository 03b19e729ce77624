#include "runtime/autoscale/autoscale.h"

#include <algorithm>
#include <cstdio>

namespace troupe::autoscale {

namespace {

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

}  // namespace

decision decide(const autoscale_config& cfg, const pool_signals& s, pool_memory& m, clock::time_point now) {
  decision d{s.serving, ""};
  if (s.serving < s.min) {  // a death took it below its floor: back at once
    m = {std::nullopt, std::nullopt, now};
    return {s.min, "below min_replicas (" + std::to_string(s.serving) + " of " + std::to_string(s.min) + ")"};
  }
  const double per = s.serving > 0 ? s.waiting / s.serving : s.waiting;
  std::string why_up;
  if (per > cfg.queue_up) why_up = "queue " + fmt(per) + " per replica > " + fmt(cfg.queue_up);
  else if (s.kv_usage > cfg.kv_up) why_up = "KV use " + fmt(s.kv_usage) + " > " + fmt(cfg.kv_up);
  else if (cfg.ttft_slo_s > 0 && s.ttft_s > cfg.ttft_slo_s) why_up = "TTFT " + fmt(s.ttft_s) + " s > SLO " + fmt(cfg.ttft_slo_s) + " s";
  else if (cfg.itl_slo_s > 0 && s.itl_s > cfg.itl_slo_s)
    why_up = "time between tokens " + fmt(s.itl_s * 1e3) + " ms > SLO " + fmt(cfg.itl_slo_s * 1e3) + " ms";
  const bool quiet = per < cfg.queue_down && s.kv_usage < cfg.kv_down && (cfg.ttft_slo_s <= 0 || s.ttft_s < cfg.ttft_slo_s / 2) &&
                     (cfg.itl_slo_s <= 0 || s.itl_s < cfg.itl_slo_s / 2) &&
                     (s.slots <= 0 || s.serving <= 1 || s.running < cfg.busy_down * s.slots * (s.serving - 1));
  if (why_up.empty()) m.up_since.reset();
  else if (!m.up_since) m.up_since = now;
  if (!quiet) m.down_since.reset();
  else if (!m.down_since) m.down_since = now;
  if (m.last_action && now - *m.last_action < cfg.cooldown) return d;
  if (!why_up.empty() && now - *m.up_since >= cfg.up_for && s.serving < s.max) {
    d.target = std::min(s.max, s.serving + std::max(1, s.serving / 2));
    d.reason = why_up;
  } else if (quiet && now - *m.down_since >= cfg.down_for && s.serving > s.min) {
    d.target = s.serving - 1;
    d.reason = "quiet: queue " + fmt(per) + " per replica < " + fmt(cfg.queue_down) + ", KV use " + fmt(s.kv_usage) + " < " +
               fmt(cfg.kv_down) + ", " + fmt(s.running) + " running";
  }
  if (d.target != s.serving) {
    m.last_action = now;
    m.up_since.reset();
    m.down_since.reset();
  }
  return d;
}

}  // namespace troupe::autoscale
