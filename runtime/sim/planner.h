// The capacity planner behind `troupe plan`: which topology serves a request trace within its
// latency SLO on the fewest devices, found by running the cluster simulator (cluster_sim.h) over
// a search space of aggregated and disaggregated topologies, replicas per pool, prefill chunk,
// step token budget and the tensor-parallel degrees the profiles were measured at.
//
// The search assumes what a serving cluster shows: adding replicas to a topology never makes its
// latency worse. So for each shape (mode, profile, chunk, budget, and for a disaggregated one its
// prefill replicas) it looks for the fewest replicas that meet the SLO by doubling and then
// halving, and never tries more than the cheapest found so far costs. brute_force_plan tries
// every point of the same space; the test holds the two to the same answer.
//
// A request meets the SLO when its TTFT and its mean ITL are within every limit given for them;
// goodput counts those per second of the run (first arrival to last token). A topology meets the SLO when each percentile
// asked for (ttft_p99 = 2 s: the 99th percentile of TTFT over all requests) is within its limit;
// a request refused by admission or never finished counts as endless.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/sim/cluster_sim.h"
#include "runtime/sim/step_fit.h"
#include "runtime/workload/public_trace.h"

namespace troupe::sim {

enum class slo_metric { ttft, itl, e2e };

struct slo_target {
  slo_metric metric = slo_metric::ttft;
  double percentile = 0.99;  // 0 < p <= 1
  double limit_s = 0;
};

// "ttft_p99=2s,itl_p99=100ms" (metrics ttft, itl, e2e; p50..p99.9; units us, ms, s, m). Throws
// input_error naming the part that is wrong.
std::vector<slo_target> parse_slo(const std::string& spec);
std::string format_slo(const std::vector<slo_target>& slo);

// What one request must meet: per metric, the tightest limit the targets give (none: endless).
struct slo_limits {
  double ttft_s, itl_s, e2e_s;
  explicit slo_limits(const std::vector<slo_target>& slo);
  bool met(const request_outcome& o) const;  // a refused request meets nothing
};

// The nearest-rank percentile (0 < p <= 1): the smallest value that at least a share p of `v`
// does not exceed; 0 for none. Reorders `v`.
double nearest_rank(std::vector<double>& v, double p);

struct plan_space {
  int max_replicas = 8;  // per candidate, all pools together
  std::vector<int> chunks{256, 512, 1024};
  std::vector<int> budgets{1024, 2048, 4096};
  bool aggregated = true, disaggregated = true;
  // One per tensor-parallel degree measured: a replica of profile k costs its tensor_parallel
  // devices. Disaggregated shapes need a profile with a transfer fit.
  std::vector<profile_file> profiles;
  sim_config base;  // policy, kv_blocks, max_num_seqs, block size, admission, report interval
};

struct plan_candidate {
  int prefill_replicas = 0;  // 0: aggregated
  int replicas = 1;          // in all
  int chunk = 512, budget = 2048;
  std::size_t profile = 0;   // index into plan_space::profiles
  int devices(const plan_space& s) const { return replicas * s.profiles[profile].tensor_parallel; }
  std::string describe(const plan_space& s) const;  // "2 prefill + 3 decode, tp 1, chunk 512, budget 2048"
};

struct plan_point {
  plan_candidate candidate;
  int devices = 0;
  bool meets = false;
  double goodput = 0;     // requests meeting the SLO per second of the run
  double attainment = 0;  // their share of all requests
  std::vector<double> observed;  // per slo_target, the percentile simulated (seconds; inf: endless)
  std::size_t refused = 0;
};

struct plan_result {
  bool found = false;
  plan_point best;                // the fewest devices meeting the SLO; then the most goodput
  std::vector<plan_point> tried;  // every point simulated, in the order tried
  std::vector<plan_point> pareto;  // of those, the ones no other beats on both devices and goodput
};

// The simulator's requests for a public trace's arrivals (prefix block ids kept as shared blocks).
std::vector<sim_request> trace_requests(const workload::public_trace& t, int block_size);

// One point: simulated and judged.
plan_point evaluate(const plan_space& s, const plan_candidate& c, const std::vector<slo_target>& slo,
                    const std::vector<sim_request>& requests);

// Throws input_error for an empty space (no profile, no chunk no larger than a budget, fewer
// than 2 replicas allowed for a disaggregated-only search).
plan_result plan(const plan_space& s, const std::vector<slo_target>& slo, const std::vector<sim_request>& requests);
plan_result brute_force_plan(const plan_space& s, const std::vector<slo_target>& slo, const std::vector<sim_request>& requests);

// The topology file for a candidate: a head serving the API and one node per replica (the shape
// `troupe deploy kubernetes` turns into pods, and `troupe launch` runs on one machine).
struct topology_options {
  std::string model = "models/kjv";
  int kv_blocks = 4096;
  double kv_bytes_per_token = 0;  // sizes kv_memory; 0: kv_blocks of 16 KiB
  std::string policy = "least_loaded";
  int max_seqs = 128, block_size = 16;
  std::string comment;  // the plan's summary, as the file's opening comment
};
std::string plan_topology_toml(const plan_space& s, const plan_candidate& c, const topology_options& o);

}  // namespace troupe::sim
