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
  // > 0: a request whose pool predicts a longer time to its first token than this (its target,
  // in seconds; predict_first_token) goes to the fallback; 0: only one the full queue refuses does.
  double max_queue_wait_s = 0;
  // Only requests of this priority or a less important one (larger) fall back.
  int min_priority = -1000000;
};

struct fallback_decision {
  bool fall_back = false;
  std::string reason;  // why, for the log and the console
};

// What a new request waits in `q` before it starts, the longer of:
//  - the requests ahead of it over the rate the pool started them at lately
//    (pool_queue::recent_start_rate): how fast its replicas take in prompts;
//  - when those ahead and those running fill the pool's `slots` (the sequences its replicas run
//    at once; 0: unknown), the requests that must end first over the rate they ended at lately:
//    a full pool starts nothing until one ends, however fast it started them before. A full
//    pool where nothing has ended predicts no end of waiting.
// None before either rate is measured, but none ahead waits nothing.
std::optional<double> predicted_wait_s(const pool_queue& q, int slots, clock::time_point now);

// The time to first token a new request can expect in `q`: the predicted wait plus what the
// pool's first tokens took beyond the waits predicted for them (pool_queue::service_s). Before
// the pool has measured its start rate, it is taken to start the requests ahead one at a time.
struct first_token_prediction {
  std::optional<double> wait;     // what pool_queue::first_token is told when the request starts
  std::optional<double> service;
  std::optional<double> ttft() const { return wait && service ? std::optional<double>(*wait + *service) : wait; }
};
first_token_prediction predict_first_token(const pool_queue& q, int slots, clock::time_point now);

// Whether a new request of `priority` goes to its model's fallback, given the admission verdict
// of its pool's queue and the time to first token it predicts (predict_first_token). Never when
// the rule names none, the request forbids it (`allowed` false: the client's allow_fallback, or it fell back once).
fallback_decision decide_fallback(const fallback_rule& rule, bool allowed, int priority, const verdict& v,
                                  std::optional<double> ttft_s);

}  // namespace troupe::admission
