// The restart intensity a supervisor applies: backoff doubling from the first delay to its cap,
// giving up at the death after max_restarts within the period, and a fresh count once the
// period has passed. And a node pod's readiness from what its replicas do.
#define BOOST_TEST_MODULE restart_policy
#include <boost/test/unit_test.hpp>

#include "runtime/supervision/restart_policy.h"
#include "runtime/supervision/readiness.h"

using namespace troupe::supervision;
using std::chrono::milliseconds;
using std::chrono::seconds;

BOOST_AUTO_TEST_CASE(backoff_doubles_to_its_cap_and_past_the_intensity_it_pauses) {
  restart_policy p;
  p.max_restarts = 4;
  p.period = seconds(60);
  p.first_delay = milliseconds(500);
  p.max_delay = milliseconds(3000);
  restart_history h;
  const auto t0 = restart_history::clock::time_point{} + seconds(1000);
  const milliseconds want[] = {milliseconds(500), milliseconds(1000), milliseconds(2000), milliseconds(3000)};
  for (int i = 0; i < 4; ++i) {
    const auto d = h.on_death(p, t0 + seconds(i));
    BOOST_TEST(!d.paused);
    BOOST_TEST(d.recent == i);
    BOOST_TEST(d.delay.count() == want[i].count());
  }
  // The fifth death within a minute: `troupe launch` gave the process up for good (a node still
  // down 140 s later while /health said 200). Now a pause, then a fresh count.
  const auto paused = h.on_death(p, t0 + seconds(5));
  BOOST_TEST(paused.paused);
  BOOST_TEST(paused.delay.count() == p.pause.count());
  BOOST_TEST(h.restarts() == 5);
}

// A child that keeps dying pauses longer each time (doubling to max_pause); one that then lives a
// whole period starts over with the short backoff.
BOOST_AUTO_TEST_CASE(pauses_in_a_row_double_and_a_calm_period_ends_them) {
  restart_policy p;
  p.max_restarts = 1;
  p.period = seconds(10);
  p.pause = seconds(20);
  p.max_pause = seconds(50);
  restart_history h;
  auto t = restart_history::clock::time_point{} + seconds(100);
  BOOST_TEST(!h.on_death(p, t).paused);  // the one restart the period allows
  t += seconds(1);
  // Each later death comes right after the restart that ended a pause (which counts in the new
  // period): a longer pause each time.
  const long long pauses[] = {20, 40, 50, 50};
  for (long long want : pauses) {
    const auto d = h.on_death(p, t);
    BOOST_TEST_REQUIRE(d.paused);
    BOOST_TEST(std::chrono::duration_cast<seconds>(d.delay).count() == want);
    t += d.delay + seconds(1);
  }
  t += seconds(60);  // a calm period
  BOOST_TEST(!h.on_death(p, t).paused);
  const auto d = h.on_death(p, t + seconds(1));
  BOOST_TEST(d.paused);
  BOOST_TEST(std::chrono::duration_cast<seconds>(d.delay).count() == 20);
}

BOOST_AUTO_TEST_CASE(deaths_spread_wider_than_the_period_restart_forever) {
  restart_policy p;
  p.max_restarts = 2;
  p.period = seconds(10);
  restart_history h;
  auto t = restart_history::clock::time_point{} + seconds(100);
  for (int i = 0; i < 20; ++i, t += seconds(6)) {  // never 3 within 10 s
    const auto d = h.on_death(p, t);
    BOOST_TEST_REQUIRE(!d.paused, "death " << i);
    BOOST_TEST(d.recent <= 1);
  }
  // Three within the period: the third pauses.
  BOOST_TEST(!h.on_death(p, t).paused);
  BOOST_TEST(h.on_death(p, t + milliseconds(1)).paused);
}

// A node pod's readiness (troupe node --status-file): ready while any replica serves, and
// while it holds none; otherwise what its replicas do.
BOOST_AUTO_TEST_CASE(a_node_is_ready_while_any_replica_serves) {
  using m = replica_mode;
  auto word = [](std::initializer_list<m> r) { return std::string(node_readiness(std::span<const m>(r.begin(), r.size()))); };
  BOOST_TEST(word({}) == "ready");
  BOOST_TEST(word({m::serving}) == "ready");
  BOOST_TEST(word({m::draining, m::serving}) == "ready");
  BOOST_TEST(word({m::parked, m::serving}) == "ready");
  BOOST_TEST(word({m::draining}) == "draining");
  BOOST_TEST(word({m::parked, m::draining}) == "draining");
  BOOST_TEST(word({m::parked, m::parked}) == "parked");
}
