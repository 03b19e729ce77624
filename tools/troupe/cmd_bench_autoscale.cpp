// troupe bench autoscale: the autoscaler against a trace on the sim backend, in this process.
// A recorded or generated trace (runtime/workload/trace.h) is replayed into a sim topology's
// request owner with time compressed by --speedup: sim steps, the trace, the autoscaler's
// intervals and SLOs all run that many times faster, and every figure is reported back in
// simulated time. Reports replica-seconds (replica-hours) the pool used, SLO attainment
// (time to first token and between tokens, per request), and each change of the pool's size;
// --fixed N runs the same trace on N replicas without the autoscaler, the comparison the
// benchmark exists for (docs/performance.md).
#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "actors/control/admin_endpoint.h"
#include "actors/cluster/local_cluster.h"
#include "runtime/common/error.h"
#include "runtime/common/log.h"
#include "runtime/workload/public_trace.h"
#include "runtime/workload/trace.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

using steady = std::chrono::steady_clock;
using go_atom = caf::atom_constant<caf::atom("go")>;

struct autoscale_bench : caf::actor_system_config {
  autoscale_bench() { actors::register_protocols(*this); }
};

struct request_stat {
  double submitted = -1, first = -1, end = -1;  // simulated seconds since the start
  int tokens = 0;
  bool failed = false;
  std::string error;
};

struct sample {
  double at = 0;  // simulated seconds
  int serving = 0, warm = 0;
  double waiting = 0;
};

// What a replay measured; the actor fills it and the caller reads it once the replay answered.
struct replay_result {
  std::vector<request_stat> stats;
  std::vector<sample> samples;
};

struct replay_state {
  std::shared_ptr<replay_result> out;
  std::vector<workload::arrival> trace;
  std::vector<std::vector<std::int64_t>> prefix_blocks;  // per arrival, when the trace names them
  double speedup = 1;
  int vocab = 0;
  std::string pool;
  actors::owner_actor owner;
  actors::admin_actor admin;
  std::chrono::milliseconds timeout{30000};
  steady::time_point t0;
  std::size_t next = 0, ended = 0;
  std::unordered_map<std::string, std::size_t> ids;
  caf::response_promise done;
  double settle_s = 0;  // simulated seconds to keep sampling after the last request ended
  bool settling = false, over = false;
  static inline const char* name = "troupe.bench_replay";
};

using replay_ptr = caf::stateful_actor<replay_state>*;

double sim_now(replay_ptr self) {
  return std::chrono::duration<double>(steady::now() - self->state.t0).count() * self->state.speedup;
}

steady::duration wall(double sim_s, double speedup) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(sim_s / speedup));
}

void finish_if_done(replay_ptr self) {
  auto& st = self->state;
  if (st.next < st.trace.size() || st.ended < st.trace.size() || st.settling) return;
  st.settling = true;  // the pool is watched settle_s more before the answer
  self->delayed_send(self, wall(st.settle_s, st.speedup), caf::ok_atom::value);
}

void end_request(replay_ptr self, std::size_t i, bool failed, const std::string& error) {
  auto& r = self->state.out->stats[i];
  if (r.end >= 0) return;
  r.end = sim_now(self);
  r.failed = failed;
  r.error = error;
  ++self->state.ended;
  finish_if_done(self);
}

void submit_due(replay_ptr self) {
  auto& st = self->state;
  const double now = sim_now(self);
  while (st.next < st.trace.size() && st.trace[st.next].at_s <= now) {
    const std::size_t i = st.next++;
    const auto& a = st.trace[i];
    engine::request r;
    r.id = "t" + std::to_string(i);
    r.prompt = workload::trace_prompt(a, i < st.prefix_blocks.size() ? st.prefix_blocks[i] : std::vector<std::int64_t>{}, i, st.vocab);
    r.params.max_tokens = a.max_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    st.ids[r.id] = i;
    st.out->stats[i].submitted = now;
    self->request(st.owner, st.timeout, actors::submit_atom::value, r, caf::actor_cast<actors::token_sink>(self))
        .then([](bool) {}, [=](caf::error& e) { end_request(self, i, true, self->system().render(e)); });
  }
  if (st.next < st.trace.size()) {
    const auto wait = st.t0 + wall(st.trace[st.next].at_s, st.speedup) - steady::now();
    self->delayed_send(self, std::max(steady::duration::zero(), wait), actors::submit_atom::value);
  }
}

void take_sample(replay_ptr self) {
  auto& st = self->state;
  const double at = sim_now(self);
  self->request(st.admin, st.timeout, actors::signals_atom::value, std::chrono::milliseconds(0))
      .then(
          [=](const actors::pool_signal_map& pools) {
            auto p = pools.find(self->state.pool);
            if (p == pools.end() || self->state.over) return;
            self->state.out->samples.push_back({at, p->second.serving, p->second.warm, p->second.waiting});
          },
          [](caf::error&) {});
}

caf::behavior replay(replay_ptr self, replay_state init) {
  self->state = std::move(init);
  self->state.out->stats.resize(self->state.trace.size());
  return {
      [=](go_atom) -> caf::result<bool> {
        auto& st = self->state;
        st.done = self->make_response_promise();
        st.t0 = steady::now();
        submit_due(self);
        self->send(self, actors::tick_atom::value);
        finish_if_done(self);
        return st.done;
      },
      [=](actors::submit_atom) { submit_due(self); },
      [=](caf::ok_atom) {
        self->state.over = true;  // from here on the caller reads `out`: nothing writes it any more
        self->state.done.deliver(true);
      },
      [=](actors::tick_atom) {  // one sample per simulated second, until the last request ends
        auto& st = self->state;
        if (st.over) return;
        take_sample(self);
        const double next = std::floor(sim_now(self)) + 1;
        self->delayed_send(self, std::max(steady::duration::zero(), st.t0 + wall(next, st.speedup) - steady::now()),
                           actors::tick_atom::value);
      },
      [=](actors::token_batch& b) {
        auto& st = self->state;
        for (auto& u : b.updates) {
          auto it = st.ids.find(u.id);
          if (it == st.ids.end()) continue;
          auto& r = st.out->stats[it->second];
          if (!u.tokens.empty() && r.first < 0) r.first = sim_now(self);
          r.tokens += int(u.tokens.size());
          if (u.finished) {
            const bool bad = u.reason == engine::finish_reason::error;
            end_request(self, it->second, bad, u.error);
          }
        }
      },
  };
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

// The autoscaler's durations and SLOs in wall time for a run `speedup` times faster.
void compress(autoscale::autoscale_config& c, double speedup) {
  auto shrink = [&](std::chrono::milliseconds& d) {
    d = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(d / speedup));
  };
  shrink(c.interval);
  shrink(c.up_for);
  shrink(c.down_for);
  shrink(c.cooldown);
  c.ttft_slo_s /= speedup;
  c.itl_slo_s /= speedup;
}


struct named_trace {
  std::vector<workload::arrival> arrivals;
  std::string name;  // the file, or the shape
  std::vector<std::vector<std::int64_t>> prefix_blocks;  // per arrival, from a Mooncake trace
};

// --trace FILE, or a Poisson trace of --shape at --peak requests per second.
named_trace trace_of(const args& a) {
  const double peak = a.get_double("peak", 40);
  if (!(peak > 0)) throw input_error("--peak: expected requests per second above 0");
  if (auto file = a.get("trace")) {
    if (a.has("shape")) throw input_error("--trace and --shape: give one");
    auto t = workload::read_public_trace(*file);
    if (t.skipped > 0)
      std::fprintf(stderr, "%s: %zu rows with no generated tokens skipped (%s format)\n", file->c_str(), t.skipped,
                   workload::trace_format_name(t.format));
    return {std::move(t.arrivals), *file, std::move(t.prefix_blocks)};
  }
  named_trace t{{}, a.get("shape", "ramp-spike-quiet")};
  double duration = 0;
  const auto profile = workload::shape_profile(t.name, peak, duration);
  t.arrivals = workload::poisson_trace(profile, duration, {128, 384}, {16, 48}, std::uint64_t(a.get_int("seed", 1)));
  return t;
}

// The pool measured: fixed at --fixed N replicas (the autoscaler off), or autoscaled.
topology::pool_spec& measured_pool(const args& a, topology::topology_config& topo, const std::string& config) {
  topology::pool_spec* pool = nullptr;
  const std::string pool_name = a.get("pool", topo.pools.front().name);
  for (auto& p : topo.pools)
    if (p.name == pool_name) pool = &p;
  if (!pool) throw input_error("--pool " + pool_name + ": no such pool in " + config);
  if (a.has("fixed")) {
    const long long n = a.get_int("fixed", 0);
    if (n < 1 || n > pool->max_replicas) throw input_error("--fixed: expected 1 to the pool's max_replicas (" + std::to_string(pool->max_replicas) + ")");
    pool->replicas = int(n);
    pool->min_replicas = int(n);
    topo.autoscaler.cfg.enabled = false;
  } else if (!topo.autoscaler.cfg.enabled) {
    throw input_error(config + ": has no enabled [autoscaler] (or run a fixed pool with --fixed N)");
  }
  return *pool;
}

// Replays the trace against the sim cluster `speedup` times faster than the trace's clock.
std::shared_ptr<replay_result> replay_trace(const args& a, topology::topology_config topo, const named_trace& t,
                                            const std::string& pool, double speedup, double& wall_s) {
  topo.sim->speedup = speedup;
  compress(topo.autoscaler.cfg, speedup);
  topo.admin = {};  // no sockets: the autoscaler and the admin actor only
  log::set_level(log::level::warn);  // a line per request would be most of the run's work
  apply_log_flags(a);
  autoscale_bench cfg;
  caf::actor_system sys{cfg};
  actors::local_cluster cluster(sys, topo, nullptr, nullptr);
  actors::admin_endpoint control(sys, topo, cluster.router(), cluster.owner(), cluster.registry());
  replay_state init;
  auto result = std::make_shared<replay_result>();
  init.out = result;
  init.trace = t.arrivals;
  init.prefix_blocks = t.prefix_blocks;
  init.speedup = speedup;
  init.vocab = topology::sim_shape(topo).vocab_size;
  init.pool = pool;
  init.owner = cluster.owner();
  init.admin = control.actor();
  init.timeout = topo.timeouts.request;
  init.settle_s = a.get_double("settle", 0);
  if (!(init.settle_s >= 0 && init.settle_s <= 86400)) throw input_error("--settle: expected simulated seconds from 0 to 86400");
  const auto limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(wall(t.arrivals.back().at_s + init.settle_s, speedup)) + 2 * topo.timeouts.request;
  auto player = sys.spawn(replay, std::move(init));
  const auto started = steady::now();
  {
    caf::scoped_actor self{sys};
    self->request(player, limit, go_atom::value).receive([](bool) {}, [&](caf::error& e) {
      throw input_error("the replay did not finish within " + std::to_string(limit.count()) + " ms: " + sys.render(e));
    });
  }
  wall_s = std::chrono::duration<double>(steady::now() - started).count();
  caf::anon_send_exit(player, caf::exit_reason::user_shutdown);
  return result;
}

// Replica-seconds (each sample's serving count held until the next sample), the peak, and the
// samples where the pool's size changed.
void pool_over_time(const replay_result& r, nlohmann::json& j) {
  double replica_s = 0;
  nlohmann::json changes = nlohmann::json::array();
  int peak_serving = 0;
  for (std::size_t k = 0; k < r.samples.size(); ++k) {
    const auto& s = r.samples[k];
    const double until = k + 1 < r.samples.size() ? r.samples[k + 1].at : s.at;
    replica_s += s.serving * (until - s.at);
    peak_serving = std::max(peak_serving, s.serving);
    if (k == 0 || s.serving != r.samples[k - 1].serving)
      changes.push_back({{"at_s", std::round(s.at * 10) / 10}, {"serving", s.serving}, {"waiting", s.waiting}});
  }
  j["replica_hours"] = replica_s / 3600;
  j["mean_replicas"] = r.samples.size() > 1 ? replica_s / r.samples.back().at : 0;
  j["peak_replicas"] = peak_serving;
  j["final_replicas"] = r.samples.empty() ? 0 : r.samples.back().serving;
  j["changes"] = changes;
}

// Latencies of the requests that were served, against the SLO; failures with the first error.
void request_figures(const replay_result& r, double ttft_slo, double itl_slo, nlohmann::json& j) {
  std::vector<double> ttfts, itls;
  int met = 0, failed = 0;
  std::string first_error;
  for (const auto& s : r.stats) {
    if (s.failed || s.first < 0) {
      ++failed;
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    const double ttft = s.first - s.submitted;
    const double itl = s.tokens > 1 ? (s.end - s.first) / (s.tokens - 1) : 0;
    ttfts.push_back(ttft);
    itls.push_back(itl);
    met += ttft <= ttft_slo && itl <= itl_slo ? 1 : 0;
  }
  const std::size_t n = r.stats.size();
  j["slo"] = {{"ttft_s", ttft_slo}, {"itl_s", itl_slo}};
  j["slo_attainment"] = n ? double(met) / double(n) : 0;
  j["failed"] = failed;
  j["ttft_s"] = {{"p50", percentile(ttfts, 0.5)}, {"p99", percentile(ttfts, 0.99)}};
  j["itl_s"] = {{"p50", percentile(itls, 0.5)}, {"p99", percentile(itls, 0.99)}};
  if (!first_error.empty()) j["first_error"] = first_error;
}

void print_report(const nlohmann::json& j) {
  const std::string mode =
      j["mode"] == "fixed" ? "fixed at " + std::to_string(j["min_replicas"].get<int>()) + " replicas" : std::string("autoscaled");
  std::printf("%s, pool %s, %s: %zu requests over %.0f simulated s (%.0fx faster: %.1f s wall)\n", j["config"].get<std::string>().c_str(),
              j["pool"].get<std::string>().c_str(), mode.c_str(), j["requests"].get<std::size_t>(), j["trace_seconds"].get<double>(),
              j["speedup"].get<double>(), j["wall_seconds"].get<double>());
  std::printf("replica-hours %.3f (mean %.2f replicas, peak %d), SLO attainment %.1f%% (TTFT <= %.2f s and ITL <= %.0f ms), %d failed\n",
              j["replica_hours"].get<double>(), j["mean_replicas"].get<double>(), j["peak_replicas"].get<int>(),
              100 * j["slo_attainment"].get<double>(), j["slo"]["ttft_s"].get<double>(), j["slo"]["itl_s"].get<double>() * 1e3,
              j["failed"].get<int>());
  std::printf("TTFT p50 %.3f s p99 %.3f s; ITL p50 %.1f ms p99 %.1f ms\n", j["ttft_s"]["p50"].get<double>(), j["ttft_s"]["p99"].get<double>(),
              j["itl_s"]["p50"].get<double>() * 1e3, j["itl_s"]["p99"].get<double>() * 1e3);
  std::printf("pool size over time:");
  for (const auto& c : j["changes"]) std::printf(" %.0fs:%d", c["at_s"].get<double>(), c["serving"].get<int>());
  std::printf("\n");
}

}  // namespace

int cmd_bench_autoscale(const args& a) {
  const std::string config = a.get("config", "configs/autoscale-sim.toml");
  auto topo = topology::load_topology(config);
  if (topo.model.backend != topology::backend_kind::sim)
    throw input_error("--config " + config + ": bench autoscale runs a sim topology (backend = \"sim\")");
  const named_trace trace = trace_of(a);
  if (auto out = a.get("write-trace")) {
    if (!trace.prefix_blocks.empty())  // the CSV has no column for them
      throw input_error("--write-trace: " + trace.name + " names prefix blocks, which a \"seconds,prompt_tokens,max_tokens\" file cannot hold");
    std::ofstream f(*out, std::ios::binary);
    f << workload::format_trace(trace.arrivals);
    if (!f) throw input_error("--write-trace " + *out + ": cannot write");
    std::printf("%zu arrivals over %.0f s written to %s\n", trace.arrivals.size(), trace.arrivals.empty() ? 0.0 : trace.arrivals.back().at_s,
                out->c_str());
    return 0;
  }
  if (trace.arrivals.empty()) throw input_error(trace.name + ": no arrivals");
  const topology::pool_spec& pool = measured_pool(a, topo, config);
  const double speedup = a.get_double("speedup", 10);
  if (!(speedup >= 1 && speedup <= 1000)) throw input_error("--speedup: expected a factor from 1 to 1000");
  const auto policy = topo.autoscaler.cfg;  // as configured, for the report
  const double ttft_slo = a.get_double("ttft-slo", policy.ttft_slo_s > 0 ? policy.ttft_slo_s : 1.0);
  const double itl_slo = a.get_double("itl-slo", policy.itl_slo_s > 0 ? policy.itl_slo_s : 0.1);
  double wall_s = 0;
  const auto result = replay_trace(a, topo, trace, pool.name, speedup, wall_s);

  nlohmann::json j = {{"config", config},
                      {"trace", trace.name},
                      {"requests", trace.arrivals.size()},
                      {"trace_seconds", trace.arrivals.back().at_s},
                      {"speedup", speedup},
                      {"wall_seconds", wall_s},
                      {"pool", pool.name},
                      {"mode", a.has("fixed") ? "fixed" : "autoscaled"},
                      {"min_replicas", pool.min_replicas},
                      {"max_replicas", pool.max_replicas},
                      {"policy",
                       {{"interval_s", policy.interval.count() / 1e3},
                        {"up_for_s", policy.up_for.count() / 1e3},
                        {"down_for_s", policy.down_for.count() / 1e3},
                        {"cooldown_s", policy.cooldown.count() / 1e3},
                        {"queue_up", policy.queue_up},
                        {"queue_down", policy.queue_down}}}};
  pool_over_time(*result, j);
  request_figures(*result, ttft_slo, itl_slo, j);
  if (a.has("json"))
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_report(j);
  return 0;
}

}  // namespace troupe::cli
