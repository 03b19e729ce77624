// The frontend's /metrics: the series it keeps (after vLLM's names, under the topology's
// prefix), how a replica's load report feeds them, and the CPU the frontend itself spends.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/engine_protocol.h"
#include "runtime/metrics/metrics.h"

namespace troupe::actors {

struct frontend_metrics {
  explicit frontend_metrics(const std::string& prefix);

  metrics::registry reg;
  metrics::histogram &ttft, &itl, &tpot, &e2e, &queue, &prefill, &decode, &transfer, &prompt_len, &gen_len;
  metrics::gauge &running, &waiting, &kv_usage, &replicas, &connections, &replica_running, &replica_waiting, &replica_kv_usage,
      &replica_up;
  metrics::counter &prompt_tokens, &generation_tokens, &preemptions, &migrations, &prefix_queries, &prefix_hits, &kv_pulls,
      &kv_pull_failures, &spec_drafts, &spec_draft_tokens, &spec_accepted_tokens, &spec_accepted_per_pos,
      &replica_steps, &replica_forward_seconds, &spec_propose_seconds, &expert_tokens, &events_published, &events_dropped, &router_decisions, &success, &rejected, &fallbacks, &frontend_cpu, &process_cpu;
};

// Counters a dashboard rates over exist from the start, at 0, not from their first event.
void zero_counters(frontend_metrics& m, const std::string& model_name);

// A replica's load report into /metrics: its gauges, and its counters as what they grew by since
// `seen`, that replica actor's last report (a restarted replica starts its own from zero).
void observe_replica(frontend_metrics& m, const std::string& model_name, load_report& seen, const std::string& name,
                     const load_report& r);

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
