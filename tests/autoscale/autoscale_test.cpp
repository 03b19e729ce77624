// The autoscaler's policy over a recorded trace, replayed second by second through a queue
// model (arrivals, replicas serving 2 requests a second each, a warm pool so a decision takes
// effect at once): a ramp, a spike, then quiet. It scales up within its reaction bound, never
// flaps (no scale-down while loaded, no scale-up once quiet, no step inside the cooldown), and
// ends at min_replicas. And the rules one at a time: hysteresis, cooldown, bounds.
#define BOOST_TEST_MODULE autoscale
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/autoscale/autoscale.h"

using namespace troupe::autoscale;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

// Requests arriving per second at second t.
double arrivals(int t) {
  if (t < 60) return 6.0 * t / 60;  // ramp
  if (t < 120) return 6;            // steady
  if (t < 150) return 15;           // spike
  return 0.2;                       // quiet
}

struct action {
  int t, from, to;
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_ramp_a_spike_and_quiet_scale_up_in_time_without_flapping_and_back_to_min) {
  autoscale_config cfg;
  cfg.enabled = true;
  const double per_replica = 2;  // requests a replica serves a second
  pool_signals s;
  s.min = 1;
  s.max = 8;
  s.serving = 1;
  pool_memory mem;
  const auto t0 = clock::now();
  double queue = 0;
  std::vector<action> actions;
  std::vector<double> queue_at(400);
  for (int t = 0; t < 400; ++t) {
    const double capacity = per_replica * s.serving;
    const double offered = queue + arrivals(t);
    const double served = std::min(offered, capacity);
    queue = offered - served;
    queue_at[std::size_t(t)] = queue;
    s.waiting = queue;
    s.kv_usage = 0.7 * served / capacity;
    s.ttft_s = queue / capacity;
    const decision d = decide(cfg, s, mem, t0 + seconds(t));
    if (d.target != s.serving) {
      BOOST_TEST(!d.reason.empty());
      actions.push_back({t, s.serving, d.target});
      s.serving = d.target;  // a warm replica joins, or a drained one leaves, at once
    }
  }
  BOOST_TEST_REQUIRE(!actions.empty());
  for (const auto& a : actions) BOOST_TEST_MESSAGE("t=" << a.t << " s: " << a.from << " -> " << a.to);
  // Reaction: the spike (t=120) is answered within up_for + cooldown + one look.
  const auto first_up_in_spike = std::find_if(actions.begin(), actions.end(), [](const action& a) { return a.t >= 120 && a.to > a.from; });
  BOOST_TEST_REQUIRE((first_up_in_spike != actions.end()));
  BOOST_TEST(first_up_in_spike->t <= 120 + 2 + 10 + 1);
  // The ramp is followed too: more than one replica before the spike.
  BOOST_TEST(std::any_of(actions.begin(), actions.end(), [](const action& a) { return a.t < 120 && a.to > 1; }));
  // No flapping: nothing goes down while loaded, nothing up once quiet, and steps are at least a
  // cooldown apart.
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].to < actions[i].from) BOOST_TEST(actions[i].t >= 150, "scaled down at t=" << actions[i].t << " under load");
    if (actions[i].to > actions[i].from) BOOST_TEST(actions[i].t < 160, "scaled up at t=" << actions[i].t << " while quiet");
    if (i > 0) BOOST_TEST(actions[i].t - actions[i - 1].t >= 10);
  }
  BOOST_TEST(s.serving == 1, "ends at min_replicas");
  BOOST_TEST(std::max_element(actions.begin(), actions.end(), [](const action& a, const action& b) { return a.to < b.to; })->to <= 8);
  BOOST_TEST(queue_at[399] == 0.0);
}

BOOST_AUTO_TEST_CASE(each_rule_on_its_own) {
  autoscale_config cfg;
  const auto t = clock::now();
  pool_memory m;
  pool_signals s;
  s.min = 1;
  s.max = 4;
  s.serving = 2;
  s.waiting = 20;  // 10 per replica
  BOOST_TEST(decide(cfg, s, m, t).target == 2);  // the signal must hold up_for first
  BOOST_TEST(decide(cfg, s, m, t + milliseconds(1999)).target == 2);
  const decision up = decide(cfg, s, m, t + milliseconds(2000));
  BOOST_TEST(up.target == 3);
  BOOST_TEST(up.reason.find("queue 10.00 per replica > 4.00") != std::string::npos, up.reason);
  s.serving = 3;
  BOOST_TEST(decide(cfg, s, m, t + seconds(5)).target == 3);   // cooldown (the signal keeps holding meanwhile)
  BOOST_TEST(decide(cfg, s, m, t + seconds(11)).target == 3);  // still 1 s of cooldown
  BOOST_TEST(decide(cfg, s, m, t + seconds(12)).target == 4);  // over: the signal held long enough
  s.serving = 4;
  BOOST_TEST(decide(cfg, s, m, t + seconds(60)).target == 4);  // at max
  // Between the thresholds: neither up nor down, however long.
  pool_memory m2;
  s.waiting = 8;  // 2 per replica: below 4, above 0.5
  for (int k = 0; k < 100; ++k) BOOST_TEST(decide(cfg, s, m2, t + seconds(k)).target == 4);
  // KV use alone, and TTFT against the SLO alone, scale up too.
  pool_memory m3;
  s.waiting = 0;
  s.kv_usage = 0.95;
  decide(cfg, s, m3, t);
  s.serving = 2;
  BOOST_TEST(decide(cfg, s, m3, t + seconds(3)).reason.find("KV use 0.95") != std::string::npos);
  pool_memory m4;
  cfg.ttft_slo_s = 0.5;
  s.kv_usage = 0.1;
  s.ttft_s = 2;
  decide(cfg, s, m4, t);
  BOOST_TEST(decide(cfg, s, m4, t + seconds(3)).reason.find("TTFT 2.00 s > SLO 0.50 s") != std::string::npos);
  // Time between tokens against its SLO alone; and a pool under it but above half may not go down.
  pool_memory m6;
  cfg.ttft_slo_s = 0;
  s.ttft_s = 0;
  cfg.itl_slo_s = 0.05;
  s.itl_s = 0.08;
  decide(cfg, s, m6, t);
  BOOST_TEST(decide(cfg, s, m6, t + seconds(3)).reason.find("time between tokens 80.00 ms > SLO 50.00 ms") != std::string::npos);
  pool_memory m7;
  s.itl_s = 0.03;  // under the SLO, above half of it: not quiet
  for (int k = 0; k < 100; ++k) BOOST_TEST(decide(cfg, s, m7, t + seconds(k)).target == 2);
  s.itl_s = 0.02;  // below half: quiet, down after down_for
  decide(cfg, s, m7, t + seconds(100));
  BOOST_TEST(decide(cfg, s, m7, t + seconds(131)).target == 1);
  cfg.itl_slo_s = 0;
  // Below min (a replica died): back at once, whatever the cooldown.
  pool_memory m5;
  m5.last_action = t;
  s.serving = 0;
  BOOST_TEST(decide(cfg, s, m5, t + milliseconds(1)).target == 1);
}
