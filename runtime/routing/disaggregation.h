// Conditional disaggregation: whether a new request's prompt should be prefilled on the prefill
// pool (and its KV pulled by a decode replica) or computed where it will decode. A remote prefill
// keeps a long prompt from stalling the decode replica's running requests, but waits behind the
// prefill pool's queue; a local one starts at once but costs the decode replica its whole
// compute. So: remote when what is left to compute is long enough to be worth moving its KV,
// and the prefill pool's queued work is at most `max_queue_ratio` times that prompt's own.
#pragma once

namespace troupe::routing {

struct disaggregation_params {
  int min_prompt = 0;          // uncached prompt tokens below this run where they decode
  double max_queue_ratio = 0;  // 0: the prefill pool's queue never keeps a prompt local
};

// `uncached_prompt`: prompt tokens the best decode replica does not hold in its prefix cache;
// `prefill_queue`: prompt tokens waiting on the least loaded live prefill replica.
inline bool prefill_remotely(int uncached_prompt, int prefill_queue, const disaggregation_params& p) {
  if (uncached_prompt < p.min_prompt || uncached_prompt <= 0) return false;
  return p.max_queue_ratio <= 0 || double(prefill_queue) <= p.max_queue_ratio * double(uncached_prompt);
}

}  // namespace troupe::routing
