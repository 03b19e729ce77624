#include "actors/api/frontend_metrics.h"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>

namespace troupe::actors {

namespace {

// Histogram bounds after vLLM's, with finer steps below 10 ms for CPU-sized models.
const std::vector<double> latency_buckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
const std::vector<double> token_buckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

}  // namespace

frontend_metrics::frontend_metrics(const std::string& p)
    : ttft(reg.add_histogram(p + "time_to_first_token_seconds", "Time to first token.", latency_buckets)),
      itl(reg.add_histogram(p + "inter_token_latency_seconds", "Time between consecutive output tokens.", latency_buckets)),
      tpot(reg.add_histogram(p + "request_time_per_output_token_seconds", "Mean time per output token after the first, per request.", latency_buckets)),
      e2e(reg.add_histogram(p + "e2e_request_latency_seconds", "End-to-end request latency.", latency_buckets)),
      queue(reg.add_histogram(p + "request_queue_time_seconds", "Time a request waited before its first scheduled step.", latency_buckets)),
      prefill(reg.add_histogram(p + "request_prefill_time_seconds", "Time from the first scheduled step to the first token.", latency_buckets)),
      decode(reg.add_histogram(p + "request_decode_time_seconds", "Time from the first token to the last.", latency_buckets)),
      transfer(reg.add_histogram(p + "request_kv_transfer_time_seconds",
                                 "Time from a decode replica's reservation of blocks for a prefilled request to its KV in place.",
                                 latency_buckets)),
      postprocess(reg.add_histogram(p + "request_postprocess_time_seconds",
                                    "Time the frontend spends on a finished request's answer: the last text, tool calls, the JSON.",
                                    latency_buckets)),
      prompt_len(reg.add_histogram(p + "request_prompt_tokens", "Prompt length of finished requests.", token_buckets)),
      gen_len(reg.add_histogram(p + "request_generation_tokens", "Output length of finished requests.", token_buckets)),
      running(reg.add_gauge(p + "num_requests_running", "Requests running on the replicas.")),
      waiting(reg.add_gauge(p + "num_requests_waiting", "Requests waiting on the replicas.")),
      kv_usage(reg.add_gauge(p + "kv_cache_usage_perc", "Fraction of KV cache blocks in use, over all replicas (0 to 1).")),
      replicas(reg.add_gauge(p + "num_replicas_live", "Replicas the router can place on.")),
      connections(reg.add_gauge(p + "http_connections_open", "Open HTTP connections, the scraping one included.")),
      replica_running(reg.add_gauge(p + "replica_num_requests_running", "Requests running, per replica.")),
      replica_waiting(reg.add_gauge(p + "replica_num_requests_waiting", "Requests waiting, per replica.")),
      replica_kv_usage(reg.add_gauge(p + "replica_kv_cache_usage_perc", "Fraction of a replica's KV cache blocks in use (0 to 1).")),
      replica_up(reg.add_gauge(p + "replica_up", "1 while the replica is live, 0 once it died.")),
      prompt_tokens(reg.add_counter(p + "prompt_tokens", "Prompt tokens of requests that produced output.")),
      generation_tokens(reg.add_counter(p + "generation_tokens", "Output tokens streamed.")),
      preemptions(reg.add_counter(p + "num_preemptions", "Sequences preempted (and later recomputed) on the replicas.")),
      migrations(reg.add_counter(p + "num_migrations", "Times a request moved to another replica after its replica died.")),
      prefix_queries(reg.add_counter(p + "prefix_cache_queries", "Prompt tokens looked up in the replicas' prefix caches.")),
      prefix_hits(reg.add_counter(p + "prefix_cache_hits", "Prompt tokens found in the replicas' prefix caches (not computed).")),
      kv_pulls(reg.add_counter(p + "kv_pulls", "KV pulls from another replica or the KV store that arrived whole.")),
      kv_pull_failures(reg.add_counter(p + "kv_pull_failures",
                                       "KV pulls that failed (refused, lost or timed out); their requests were prefilled again.")),
      spec_drafts(reg.add_counter(p + "spec_decode_num_drafts", "Speculative decoding: verify steps of a request that proposed tokens.")),
      spec_draft_tokens(reg.add_counter(p + "spec_decode_num_draft_tokens", "Speculative decoding: tokens proposed.")),
      spec_accepted_tokens(reg.add_counter(p + "spec_decode_num_accepted_tokens",
                                           "Speculative decoding: proposed tokens the output took (the target chose the same).")),
      spec_accepted_per_pos(reg.add_counter(p + "spec_decode_num_accepted_tokens_per_pos",
                                            "Speculative decoding: accepted tokens by their position in a step's proposal (0: the first).")),
      replica_steps(reg.add_counter(p + "replica_engine_steps", "Engine steps (forward passes) run, per replica.")),
      replica_forward_seconds(reg.add_counter(p + "replica_forward_seconds",
                                              "Seconds in the model's forward pass, per replica (divided by replica_engine_steps: "
                                              "the mean step cost).")),
      spec_propose_seconds(reg.add_counter(p + "spec_decode_propose_seconds",
                                           "Speculative decoding: seconds proposing (a draft model's forward, n-gram lookups), "
                                           "per replica, outside replica_forward_seconds.")),
      expert_tokens(reg.add_counter(p + "moe_expert_tokens", "Mixture-of-experts models: tokens routed to each expert, over all layers, per replica.")),
      events_published(reg.add_counter(p + "kv_events_published", "KV events sent on the [kv_events] endpoint.")),
      events_dropped(reg.add_counter(p + "kv_events_dropped", "KV events dropped because the publisher fell behind.")),
      router_decisions(reg.add_counter(p + "router_decisions", "Routing decisions by the policy's reason.")),
      success(reg.add_counter(p + "request_success", "Finished requests by finish reason.")),
      rejected(reg.add_counter(p + "request_rejected", "Requests refused before running, by HTTP status.")),
      fallbacks(reg.add_counter(p + "model_fallbacks", "Requests for model_name that admission sent to its fallback model and that it answered.")),
      slo(reg.add_counter(p + "slo_requests", "Finished requests held to [frontend] ttft_slo and itl_slo, by whether they met both (met) or "
                                              "not, failures included; cancelled ones are not counted.")),
      frontend_cpu(reg.add_counter(p + "frontend_cpu_seconds", "CPU time of the HTTP frontend: its I/O thread and its actor.")),
      process_cpu(reg.add_counter("process_cpu_seconds", "Total user and system CPU time spent in seconds.")) {
  // Clients choose these values: without a bound, each new one is a series in every scrape.
  reg.bound_label("tenant", {});
  reg.bound_label("priority", {16, 12, "other"});
}

std::string length_bucket(int n) {
  if (n <= 128) return "1-128";
  if (n <= 512) return "129-512";
  if (n <= 2048) return "513-2048";
  if (n <= 8192) return "2049-8192";
  return "8193+";
}

const char* cache_state(int cached, int prompt) {
  if (cached <= 0) return "miss";
  return 2 * cached < prompt ? "partial" : "hit";
}

metrics::labels with_output(const metrics::labels& l, int output_tokens) {
  metrics::labels out = l;
  out.emplace_back("output_bucket", length_bucket(output_tokens));
  return out;
}

void judge_slo(frontend_metrics& m, std::chrono::milliseconds ttft_slo, std::chrono::milliseconds itl_slo, const request_times& t,
               const metrics::labels& l, bool error) {
  if (ttft_slo.count() == 0 && itl_slo.count() == 0) return;
  using ms = std::chrono::duration<double, std::milli>;
  bool met = !error && t.output_tokens > 0;
  if (met && ttft_slo.count() > 0) met = ms(t.first_token - t.arrived).count() <= double(ttft_slo.count());
  if (met && itl_slo.count() > 0 && t.output_tokens > 1)
    met = ms(t.last_token - t.first_token).count() / (t.output_tokens - 1) <= double(itl_slo.count());
  metrics::labels judged = l;
  judged.emplace_back("met", met ? "true" : "false");
  m.slo.inc(judged);
}

void zero_counters(frontend_metrics& m, const std::string& model_name) {
  for (auto* c : {&m.preemptions, &m.spec_drafts, &m.spec_draft_tokens, &m.spec_accepted_tokens, &m.migrations, &m.prefix_queries,
                  &m.prefix_hits, &m.kv_pulls, &m.kv_pull_failures, &m.events_published, &m.events_dropped})
    c->inc({{"model_name", model_name}}, 0);
  // Failures and cancellations are rare: their series exist before the first one.
  for (const char* reason : {"error", "abort"}) m.success.inc({{"model_name", model_name}, {"finished_reason", reason}}, 0);
}

void observe_replica(frontend_metrics& m, const std::string& model_name, load_report& seen, const std::string& name,
                     const load_report& r) {
  const metrics::labels rl = {{"model_name", model_name}, {"replica", name}};
  m.replica_running.set(rl, r.running_seqs);
  m.replica_waiting.set(rl, r.waiting_seqs);
  m.replica_kv_usage.set(rl, r.total_blocks ? double(r.used_blocks) / r.total_blocks : 0.0);
  m.replica_up.set(rl, 1);
  // One series per expert the model has (the replica's report, not the client, sets them).
  for (std::size_t e = 0; e < r.expert_tokens.size(); ++e) {
    metrics::labels el = rl;
    el.emplace_back("expert", std::to_string(e));
    m.expert_tokens.advance_to(el, double(r.expert_tokens[e]));
  }
  const metrics::labels ml = {{"model_name", model_name}};
  auto delta = [](metrics::counter& c, const metrics::labels& l, auto now, auto& before) {
    if (now > before) c.inc(l, double(now - before));
    before = now;
  };
  delta(m.preemptions, ml, r.preemptions, seen.preemptions);
  delta(m.prefix_queries, ml, r.prefix_queries, seen.prefix_queries);
  delta(m.prefix_hits, ml, r.prefix_hits, seen.prefix_hits);
  delta(m.kv_pulls, ml, r.kv_pulls, seen.kv_pulls);
  delta(m.kv_pull_failures, ml, r.kv_pull_failures, seen.kv_pull_failures);
  delta(m.spec_drafts, ml, r.spec_drafts, seen.spec_drafts);
  delta(m.spec_draft_tokens, ml, r.spec_draft_tokens, seen.spec_draft_tokens);
  delta(m.spec_accepted_tokens, ml, r.spec_accepted_tokens, seen.spec_accepted_tokens);
  delta(m.replica_steps, rl, r.steps, seen.steps);
  delta(m.replica_forward_seconds, rl, r.forward_seconds, seen.forward_seconds);
  delta(m.spec_propose_seconds, rl, r.spec_propose_seconds, seen.spec_propose_seconds);
  // One series per position (at most k, bounded by the config, not the client).
  seen.spec_accepted_per_pos.resize(std::max(seen.spec_accepted_per_pos.size(), r.spec_accepted_per_pos.size()));
  for (std::size_t j = 0; j < r.spec_accepted_per_pos.size(); ++j) {
    metrics::labels pl = ml;
    pl.emplace_back("position", std::to_string(j));
    delta(m.spec_accepted_per_pos, pl, r.spec_accepted_per_pos[j], seen.spec_accepted_per_pos[j]);
  }
}


double thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double process_cpu_now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

}  // namespace troupe::actors
