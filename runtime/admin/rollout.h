// A canary rollout (`rollout POOL --model DIR ...`, docs/admin.md) as plain decisions: what the
// command's arguments say, how the canary's live figures compare with the baseline's, and what
// to do next. The admin actor carries the decisions out (replicas through the swap machinery,
// the split through the router) and asks again every second.
//
// A rollout holds each share for its step's time; it rolls back at the first breach of the gate
// (the canary's latency percentiles too far above the baseline's, or its error or refusal share),
// and promotes (every replica to the new revision) once the next share would be 100%.
#pragma once
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/admin/quality_gate.h"
#include "runtime/admission/replica_figures.h"

namespace troupe::admin {

struct rollout_step {
  double share = 0;   // of the pool model's senders on the canary, 0 to 1
  double hold_s = 0;  // how long it is held before the next
};

// When the canary is worse than the baseline. Latencies are judged once each side has
// `min_requests` samples; rates once the canary has seen that many requests.
struct rollout_gate {
  double max_ttft_ratio = 1.5;    // canary's TTFT p50 and p99 over the baseline's
  double max_itl_ratio = 1.5;     // the same for the time between tokens
  double max_error_rate = 0.01;   // canary's failed share above the baseline's
  double max_refusal_rate = 0.05; // canary's refused share above the baseline's
  int min_requests = 20;
};

struct rollout_request {
  std::string pool, dir, revision;
  std::vector<rollout_step> steps;  // rising shares below 1; promotion follows the last
  rollout_gate gate;
  quality_gate quality;  // off unless --held-out or --prompts names a file
};

// POOL --model DIR [--revision R] [--canary P%] [--step P%:DURATION] [--max-ttft-ratio X]
// [--max-itl-ratio X] [--max-error-rate X] [--max-refusal-rate X] [--min-requests N]
// [--held-out FILE] [--prompts FILE] [--max-ppl-ratio X] [--min-greedy-match X]
// [--greedy-tokens N]; or why not. The canary starts at --canary (default 10%) and grows by --step's share (default 10%)
// after each of its durations (default 5m: "30s", "5m", "1h").
std::variant<rollout_request, std::string> parse_rollout(const std::vector<std::string>& args);

// One side's figures, summed over its replicas.
struct side_figures {
  int finished = 0, failed = 0, refused = 0;
  std::vector<double> ttft_s, itl_s;
  void add(const admission::replica_figures& f);
  int requests() const { return finished + failed + refused; }
};

// Why the canary breaches the gate against the baseline (with the figures), or nothing.
std::optional<std::string> breach(const side_figures& canary, const side_figures& baseline, const rollout_gate& gate);

enum class rollout_phase { canary, paused, promoting, promoted, rolling_back, rolled_back, failed };
const char* phase_name(rollout_phase p);
// Whether a rollout in this phase still needs a head (canary, paused, promoting, rolling back).
bool under_way(rollout_phase p);

struct rollout_decision {
  enum class kind { hold, advance, promote, roll_back } what = kind::hold;
  std::string why;
};

// In phase canary at step `step` (held since `held_s` seconds): the next move. A step whose
// quality gate has not passed yet (`quality_pending`) is held however long it has been.
rollout_decision decide(const rollout_request& r, std::size_t step, double held_s, const std::optional<std::string>& breached,
                        bool quality_pending = false);

}  // namespace troupe::admin
