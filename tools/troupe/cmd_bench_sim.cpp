// troupe bench sim: how fast the cluster simulator (runtime/sim/cluster_sim.h) runs: simulated
// requests per wall second at several cluster sizes, on one seeded synthetic workload scaled
// with the cluster (the same arrival rate per replica), so the figure a capacity search relies
// on (how many configurations a minute can be tried) is measured, not guessed.
// The step profile is a fitted one (--profile) or a fixed, plausible one (a few ms per step, tens
// of µs per token): what is timed is the simulator's work, which follows the events it
// processes (steps, arrivals), not the hardware it predicts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/sim/cluster_sim.h"
#include "runtime/sim/step_fit.h"
#include "runtime/workload/trace.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

// `requests` Poisson arrivals at `per_replica` requests/s per replica; prompts of 64-512 tokens
// whose leading block is one of 64 shared system prompts, answers of 16-256 tokens.
std::vector<sim::sim_request> workload(int replicas, std::size_t requests, double per_replica, int block_size) {
  const double rate = per_replica * replicas;
  const auto arrivals = workload::poisson_trace({{0, rate}}, double(requests) / rate * 1.2 + 1, {64, 512}, {16, 256}, 7);
  std::vector<sim::sim_request> out;
  out.reserve(std::min(requests, arrivals.size()));
  for (std::size_t i = 0; i < arrivals.size() && out.size() < requests; ++i) {
    const std::int64_t system[] = {std::int64_t(i % 64)};
    out.push_back({arrivals[i].at_s, arrivals[i].prompt_tokens, arrivals[i].max_tokens,
                   sim::sim_prompt_blocks(system, 512, i, arrivals[i].prompt_tokens, block_size)});
  }
  return out;
}

double nearest_rank(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const std::size_t k = std::min(v.size() - 1, std::size_t(p * double(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

}  // namespace

int cmd_bench_sim(const args& a) {
  const std::vector<int> scales = int_list({"replicas", "counts", "32,256,1000", "count", 1, 100000}, a.get("replicas", "32,256,1000"));
  const long long requests = a.get_int("requests", 1000000);
  if (requests < 1) throw input_error("--requests: must be positive");
  const double per_replica = a.get_double("rate", 4.0);
  if (!(per_replica > 0)) throw input_error("--rate: must be positive");
  sim::sim_config cfg;
  cfg.policy = a.get("policy", "least_loaded");
  cfg.sched.max_num_batched_tokens = 2048;
  cfg.sched.long_prefill_chunk = 512;
  cfg.kv_blocks = 4096;
  const sim::step_profile profile = a.has("profile") ? sim::read_profile_file(*a.get("profile"), "profile").served_step() : sim::step_profile{4e-3, 30e-6, 2e-9};
  const bool json_out = a.has("json");

  nlohmann::json rows = nlohmann::json::array();
  if (!json_out)
    std::printf("%9s %9s %9s %14s %11s %9s %9s %9s\n", "replicas", "requests", "wall s", "requests/s", "virtual s", "TTFT p50",
                "TTFT p99", "ITL p50");
  for (int replicas : scales) {
    cfg.replicas = replicas;
    const auto reqs = workload(replicas, std::size_t(requests), per_replica, cfg.sched.block_size);
    const auto t0 = std::chrono::steady_clock::now();
    const sim::sim_result r = sim::simulate(cfg, profile, reqs);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> ttft, itl;
    for (const auto& o : r.requests) {
      ttft.push_back(o.ttft_s);
      if (o.mean_itl_s > 0) itl.push_back(o.mean_itl_s);
    }
    const nlohmann::json row{{"replicas", replicas},
                             {"requests", reqs.size()},
                             {"wall_s", wall},
                             {"requests_per_s", double(reqs.size()) / wall},
                             {"virtual_s", r.end_s},
                             {"steps", r.steps},
                             {"ttft_p50_s", nearest_rank(ttft, 0.5)},
                             {"ttft_p99_s", nearest_rank(ttft, 0.99)},
                             {"itl_p50_s", nearest_rank(itl, 0.5)}};
    rows.push_back(row);
    if (!json_out)
      std::printf("%9d %9zu %9.1f %14.0f %11.0f %8.0fms %8.0fms %8.1fms\n", replicas, reqs.size(), wall, double(reqs.size()) / wall,
                  r.end_s, 1e3 * row["ttft_p50_s"].get<double>(), 1e3 * row["ttft_p99_s"].get<double>(),
                  1e3 * row["itl_p50_s"].get<double>());
    std::fflush(stdout);
  }
  if (json_out)
    std::printf("%s\n", nlohmann::json{{"policy", cfg.policy},
                                       {"rate_per_replica", per_replica},
                                       {"profile", {{"base_s", profile.base_s}, {"per_token_s", profile.per_token_s},
                                                    {"per_context_s", profile.per_context_s}}},
                                       {"rows", rows}}
                            .dump(2)
                            .c_str());
  return 0;
}

}  // namespace troupe::cli
