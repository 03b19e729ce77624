// A smaller model under overload (issue 29): per model, a rule naming its fallback model and
// when a new request goes there instead of being refused or queued past its target. Pure
// policy: the request owner asks once per new request, after routing, with the queue of the
// pool the router chose.
#pragma once
#include <optional>
#include <string>

#include "runtime/admission/admission.h"

namespace troupe::admission {

struct fallback_rule {
  std::string to;  // the topology's name of the fallback model; empty: no fallback
  // > 0: a request whose pool predicts a longer queue wait than this (its time-to-first-token
  // target, in seconds) goes to the fallback; 0: only one the full queue refuses does.
  double max_queue_wait_s = 0;
  // Only requests of this priority or a less important one (larger) fall back.
  int min_priority = -1000000;
};

struct fallback_decision {
  bool fall_back = false;
  std::string reason;  // why, for the log and the console
};

// What a new request waits in `q` before it starts: the requests ahead of it over the rate the
// pool started them at lately (pool_queue::recent_start_rate); none before that is measured.
std::optional<double> predicted_wait_s(const pool_queue& q, clock::time_point now);

// Whether a new request of `priority` goes to its model's fallback, given the admission verdict
// of its pool's queue and that queue's predicted wait. Never when the rule names none, the
// request forbids it (`allowed` false: the client's allow_fallback, or it fell back once).
fallback_decision decide_fallback(const fallback_rule& rule, bool allowed, int priority, const verdict& v,
                                  std::optional<double> wait_s);

}  // namespace troupe::admission
