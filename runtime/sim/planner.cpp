#include "runtime/sim/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "runtime/common/error.h"

namespace troupe::sim {

namespace {

constexpr double plan_endless = std::numeric_limits<double>::infinity();

const char* slo_metric_name(slo_metric m) { return m == slo_metric::ttft ? "ttft" : m == slo_metric::itl ? "itl" : "e2e"; }

double slo_parse_limit(const std::string& v, const std::string& part) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = v.substr(used);
  const std::map<std::string, double> scale{{"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}};
  const auto u = scale.find(unit);
  if (used == 0 || u == scale.end() || !(x > 0) || !std::isfinite(x))
    throw input_error("--slo: " + part + ": the limit must be a positive time with a unit (us, ms, s, m), as 2s or 100ms");
  return x * u->second;
}

slo_target slo_parse_target(const std::string& part) {
  const auto eq = part.find('=');
  const auto us = part.find("_p");
  if (eq == std::string::npos || us == std::string::npos || us > eq)
    throw input_error("--slo: " + part + ": expected METRIC_pPERCENTILE=LIMIT, as ttft_p99=2s");
  const std::string metric = part.substr(0, us), pct = part.substr(us + 2, eq - us - 2);
  slo_target t;
  if (metric == "ttft")
    t.metric = slo_metric::ttft;
  else if (metric == "itl")
    t.metric = slo_metric::itl;
  else if (metric == "e2e")
    t.metric = slo_metric::e2e;
  else
    throw input_error("--slo: " + part + ": the metric is ttft, itl or e2e, not " + metric);
  std::size_t used = 0;
  double p = 0;
  try {
    p = std::stod(pct, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != pct.size() || !(p > 0) || p > 100) throw input_error("--slo: " + part + ": the percentile is 0 to 100, as p99 or p99.9");
  t.percentile = p / 100;
  t.limit_s = slo_parse_limit(part.substr(eq + 1), part);
  return t;
}

// A request's limit for a metric: the tightest of the targets naming it.
double plan_limit_for(const std::vector<slo_target>& slo, slo_metric m) {
  double l = plan_endless;
  for (const auto& t : slo)
    if (t.metric == m) l = std::min(l, t.limit_s);
  return l;
}

// The order both searches break ties in, so that they name the same point.
auto plan_order(const plan_candidate& c) { return std::tuple(c.profile, c.chunk, c.budget, c.prefill_replicas, c.replicas); }

bool plan_better(const plan_point& a, const plan_point& b) {
  if (a.devices != b.devices) return a.devices < b.devices;
  if (a.goodput != b.goodput) return a.goodput > b.goodput;
  if (a.attainment != b.attainment) return a.attainment > b.attainment;
  return plan_order(a.candidate) < plan_order(b.candidate);
}

bool plan_can_disaggregate(const profile_file& p) { return p.transfer && p.kv_bytes_per_token > 0; }

void plan_check_space(const plan_space& s) {
  if (s.profiles.empty()) throw input_error("plan: no step profile to price a step with");
  if (s.max_replicas < 1) throw input_error("plan: --max-replicas must be at least 1");
  bool shape = false;
  for (int c : s.chunks)
    for (int b : s.budgets) shape = shape || (c >= 1 && c <= b);
  if (!shape) throw input_error("plan: no chunk is at most a budget: nothing to search");
  if (!s.aggregated && !s.disaggregated) throw input_error("plan: neither aggregated nor disaggregated topologies to search");
  if (!s.aggregated && s.max_replicas < 2) throw input_error("plan: a disaggregated topology needs --max-replicas of at least 2");
}

// Calls f(candidate) for each shape of the space: every field but the replicas (the aggregated
// shape has prefill_replicas 0; a disaggregated one, each prefill count that leaves a decode).
template <typename F>
void plan_for_each_shape(const plan_space& s, F&& f) {
  for (std::size_t k = 0; k < s.profiles.size(); ++k)
    for (int chunk : s.chunks)
      for (int budget : s.budgets) {
        if (chunk < 1 || chunk > budget) continue;
        plan_candidate c{0, 1, chunk, budget, k};
        if (s.aggregated) f(c);
        if (!s.disaggregated || !plan_can_disaggregate(s.profiles[k])) continue;
        for (int p = 1; p < s.max_replicas; ++p) {
          c.prefill_replicas = p;
          f(c);
        }
      }
}

class plan_search {
 public:
  plan_search(const plan_space& s, const std::vector<slo_target>& slo, const std::vector<sim_request>& r) : s_(s), slo_(slo), reqs_(r) {}

  const plan_point& at(plan_candidate c) {
    const auto key = plan_order(c);
    auto it = seen_.find(key);
    if (it == seen_.end()) {
      it = seen_.emplace(key, out_.tried.size()).first;
      out_.tried.push_back(evaluate(s_, c, slo_, reqs_));
      const plan_point& p = out_.tried.back();
      if (p.meets && (!out_.found || plan_better(p, out_.best))) {
        out_.best = p;
        out_.found = true;
      }
    }
    return out_.tried[it->second];
  }

  // The fewest replicas of this shape that meet the SLO, no more than `hi`: doubling until one
  // meets, then halving the gap to the last that did not.
  void fewest(plan_candidate c, int hi) {
    const int lo_start = c.prefill_replicas + 1;
    int failed = lo_start - 1, n = lo_start;
    while (true) {
      if (n > hi) return;
      c.replicas = n;
      if (at(c).meets) break;
      failed = n;
      if (n == hi) return;
      n = std::min(hi, lo_start + 2 * (n - lo_start + 1) - 1);
    }
    int lo = failed + 1, top = n;
    while (lo < top) {
      c.replicas = lo + (top - lo) / 2;
      if (at(c).meets)
        top = c.replicas;
      else
        lo = c.replicas + 1;
    }
  }

  // The most replicas a shape may have and still tie the cheapest found.
  int bound(const plan_candidate& c) const {
    const int tp = s_.profiles[c.profile].tensor_parallel;
    const int by_max = s_.max_replicas;
    return out_.found ? std::min(by_max, out_.best.devices / tp) : by_max;
  }

  plan_result finish() {
    out_.pareto.clear();
    std::vector<plan_point> by_cost = out_.tried;
    std::sort(by_cost.begin(), by_cost.end(), plan_better);
    double top = -1;
    for (const auto& p : by_cost)
      if (p.goodput > top) {  // more than anything as cheap: on the frontier
        out_.pareto.push_back(p);
        top = p.goodput;
      }
    return std::move(out_);
  }

 private:
  const plan_space& s_;
  const std::vector<slo_target>& slo_;
  const std::vector<sim_request>& reqs_;
  std::map<decltype(plan_order(plan_candidate{})), std::size_t> seen_;
  plan_result out_;
};

}  // namespace

double nearest_rank(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const std::size_t rank = std::size_t(std::ceil(p * double(v.size())));
  const std::size_t k = std::min(v.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(k), v.end());
  return v[k];
}

slo_limits::slo_limits(const std::vector<slo_target>& slo)
    : ttft_s(plan_limit_for(slo, slo_metric::ttft)), itl_s(plan_limit_for(slo, slo_metric::itl)), e2e_s(plan_limit_for(slo, slo_metric::e2e)) {}

bool slo_limits::met(const request_outcome& o) const {
  return !o.refused && o.ttft_s <= ttft_s && o.mean_itl_s <= itl_s && o.e2e_s <= e2e_s;
}

std::vector<slo_target> parse_slo(const std::string& spec) {
  std::vector<slo_target> out;
  std::stringstream in(spec);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) out.push_back(slo_parse_target(part));
  if (out.empty()) throw input_error("--slo: no target given (as ttft_p99=2s,itl_p99=100ms)");
  return out;
}

std::string format_slo(const std::vector<slo_target>& slo) {
  std::string out;
  for (const auto& t : slo) {
    std::ostringstream one;
    one << slo_metric_name(t.metric) << "_p" << t.percentile * 100 << "=";
    if (t.limit_s < 1)
      one << t.limit_s * 1e3 << "ms";
    else
      one << t.limit_s << "s";
    out += (out.empty() ? "" : ",") + one.str();
  }
  return out;
}

std::string plan_candidate::describe(const plan_space& s) const {
  std::ostringstream o;
  if (prefill_replicas > 0)
    o << prefill_replicas << " prefill + " << replicas - prefill_replicas << " decode";
  else
    o << replicas << " aggregated";
  o << ", tp " << s.profiles[profile].tensor_parallel << ", chunk " << chunk << ", budget " << budget;
  return o.str();
}

std::vector<sim_request> trace_requests(const workload::public_trace& t, int block_size) {
  std::vector<sim_request> out;
  out.reserve(t.arrivals.size());
  for (std::size_t i = 0; i < t.arrivals.size(); ++i) {
    const auto& a = t.arrivals[i];
    const std::span<const std::int64_t> shared =
        i < t.prefix_blocks.size() ? std::span<const std::int64_t>(t.prefix_blocks[i]) : std::span<const std::int64_t>();
    out.push_back({a.at_s, a.prompt_tokens, a.max_tokens,
                   sim_prompt_blocks(shared, workload::mooncake_block_tokens, i, a.prompt_tokens, block_size)});
  }
  return out;
}

plan_point evaluate(const plan_space& s, const plan_candidate& c, const std::vector<slo_target>& slo,
                    const std::vector<sim_request>& requests) {
  const profile_file& prof = s.profiles[c.profile];
  sim_config cfg = s.base;
  cfg.replicas = c.replicas;
  cfg.prefill_replicas = c.prefill_replicas;
  cfg.sched.long_prefill_chunk = c.chunk;
  cfg.sched.max_num_batched_tokens = c.budget;
  if (c.prefill_replicas > 0) cfg.transfer = prof.transfer_cost(prof.source);
  prof.price_serving(cfg);
  const sim_result r = simulate(cfg, prof.served_step(), requests);

  plan_point p{c, c.devices(s), false, 0, 0, {}, r.refused};
  const slo_limits limits(slo);
  std::vector<double> ttft, itl, e2e;
  std::size_t met = 0;
  for (const auto& o : r.requests) {
    ttft.push_back(o.refused ? plan_endless : o.ttft_s);
    itl.push_back(o.refused ? plan_endless : o.mean_itl_s);
    e2e.push_back(o.refused ? plan_endless : o.e2e_s);
    met += limits.met(o);
  }
  p.meets = true;
  for (const auto& t : slo) {
    auto& v = t.metric == slo_metric::ttft ? ttft : t.metric == slo_metric::itl ? itl : e2e;
    p.observed.push_back(nearest_rank(v, t.percentile));
    p.meets = p.meets && p.observed.back() <= t.limit_s;
  }
  // Over the run, first arrival to last token, as `troupe bench serve` measures it: a cluster
  // that falls behind takes longer than the trace and serves fewer per second.
  const double span = requests.empty() ? 0 : std::max(r.end_s, requests.back().arrival_s) - requests.front().arrival_s;
  p.goodput = span > 0 ? double(met) / span : 0;
  p.attainment = requests.empty() ? 1 : double(met) / double(requests.size());
  return p;
}

plan_result plan(const plan_space& s, const std::vector<slo_target>& slo, const std::vector<sim_request>& requests) {
  plan_check_space(s);
  plan_search search(s, slo, requests);
  plan_for_each_shape(s, [&](const plan_candidate& c) { search.fewest(c, search.bound(c)); });
  return search.finish();
}

plan_result brute_force_plan(const plan_space& s, const std::vector<slo_target>& slo, const std::vector<sim_request>& requests) {
  plan_check_space(s);
  plan_search search(s, slo, requests);
  plan_for_each_shape(s, [&](plan_candidate c) {
    for (c.replicas = c.prefill_replicas + 1; c.replicas <= s.max_replicas; ++c.replicas) search.at(c);
  });
  return search.finish();
}

std::string plan_topology_toml(const plan_space& s, const plan_candidate& c, const topology_options& o) {
  std::ostringstream t;
  std::istringstream comment(o.comment);
  for (std::string line; std::getline(comment, line);) t << "# " << line << "\n";
  t << "\n[model]\npath = \"" << o.model << "\"\n\n[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:7730\"\n";
  auto pool = [&](const std::string& name, const char* role, int replicas) {
    for (int i = 0; i < replicas; ++i) t << "\n[[nodes]]\nname = \"" << name << "-" << i << "\"\n";
    t << "\n[[pools]]\nname = \"" << name << "\"\nrole = \"" << role << "\"\nreplicas = " << replicas << "\nnodes = [";
    for (int i = 0; i < replicas; ++i) t << (i ? ", " : "") << "\"" << name << "-" << i << "\"";
    t << "]\n";
    if (s.profiles[c.profile].tensor_parallel > 1) t << "tensor_parallel = " << s.profiles[c.profile].tensor_parallel << "\n";
  };
  if (c.prefill_replicas > 0) {
    pool("prefill", "prefill", c.prefill_replicas);
    pool("decode", "decode", c.replicas - c.prefill_replicas);
  } else {
    pool("main", "both", c.replicas);
  }
  t << "\n[scheduler]\nmax_batched_tokens = " << c.budget << "\nmax_seqs = " << o.max_seqs << "\nblock_size = " << o.block_size
    << "\nchunk = " << c.chunk << "\n";
  if (o.kv_bytes_per_token > 0) {
    const double bytes = double(o.kv_blocks) * o.block_size * o.kv_bytes_per_token;
    t << "kv_memory = \"" << std::int64_t(std::ceil(bytes / 1048576)) << "MiB\"   # " << o.kv_blocks << " blocks, as simulated\n";
  }
  t << "\n[router]\npolicy = \"" << o.policy << "\"\n\n[timeouts]\nheartbeat = \"1s\"\nsuspect = \"3s\"\nconnection = \"15s\"\nrequest = \"30s\"\n";
  return t.str();
}

}  // namespace troupe::sim
