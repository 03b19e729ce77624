// The frontend's /metrics: the series it keeps (after vLLM's names, under the topology's
// prefix), how a replica's load report feeds them, and the CPU the frontend itself spends.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"
#include "runtime/metrics/metrics.h"

namespace troupe::actors {

struct frontend_metrics {
  explicit frontend_metrics(const std::string& prefix);

  metrics::registry reg;
  metrics::histogram &ttft, &itl, &tpot, &e2e, &queue, &prefill, &decode, &transfer, &postprocess, &prompt_len, &gen_len;
  metrics::gauge &running, &waiting, &kv_usage, &replicas, &connections, &replica_running, &replica_waiting, &replica_kv_usage,
      &replica_up;
  metrics::counter &prompt_tokens, &generation_tokens, &preemptions, &migrations, &prefix_queries, &prefix_hits, &kv_pulls,
      &kv_pull_failures, &spec_drafts, &spec_draft_tokens, &spec_accepted_tokens, &spec_accepted_per_pos,
      &replica_steps, &replica_forward_seconds, &spec_propose_seconds, &expert_tokens, &events_published, &events_dropped, &router_decisions, &success, &rejected, &fallbacks, &slo, &frontend_cpu, &process_cpu;
};

// Counters a dashboard rates over exist from the start, at 0, not from their first event.
void zero_counters(frontend_metrics& m, const std::string& model_name);

// A replica's load report into /metrics: its gauges, and its counters as what they grew by since
// `seen`, that replica actor's last report (a restarted replica starts its own from zero).
void observe_replica(frontend_metrics& m, const std::string& model_name, load_report& seen, const std::string& name,
                     const load_report& r);

// The `input_bucket` (and `output_bucket`) label of a length in tokens.
std::string length_bucket(int tokens);

// The `cache` label of a request's time to first token: none of its prompt found in the
// prefix cache ("miss"), less than half of it ("partial"), or at least half ("hit").
const char* cache_state(int cached_tokens, int prompt_tokens);

// A finished request's labels with its output length's bucket, for the latencies it decides.
metrics::labels with_output(const metrics::labels& l, int output_tokens);

// When a request came, its first and last token, and how many it had.
struct request_times {
  std::chrono::steady_clock::time_point arrived, first_token, last_token;
  int output_tokens = 0;
};

// Counts a finished (or failed: `error`) request in slo_requests_total by whether it met
// ttft_slo and itl_slo (0: that bound not set; neither set: nothing is counted). A failed
// request missed.
void judge_slo(frontend_metrics& m, std::chrono::milliseconds ttft_slo, std::chrono::milliseconds itl_slo, const request_times& t,
               const metrics::labels& l, bool error);

// Times the frontend's work on a finished request's answer into request_postprocess_time_seconds,
// from its construction to its end (when `observe`).
struct postprocess_timer {
  metrics::histogram& h;
  const metrics::labels& labels;
  bool observe = false;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~postprocess_timer() {
    if (observe) h.observe(labels, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
};

double thread_cpu_now();
double process_cpu_now();

// Adds the CPU time of the enclosing handler to the frontend's account.
struct cpu_account {
  explicit cpu_account(double& total) : total_(total), t0_(thread_cpu_now()) {}
  ~cpu_account() { total_ += thread_cpu_now() - t0_; }
  double& total_;
  double t0_;
};


}  // namespace troupe::actors
