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

BOOST_AUTO_TEST_CASE(backoff_doubles_to_its_cap_and_the_intensity_gives_up) {
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
    BOOST_TEST(!d.give_up);
    BOOST_TEST(d.recent == i);
    BOOST_TEST(d.delay.count() == want[i].count());
  }
  BOOST_TEST(h.on_death(p, t0 + seconds(5)).give_up);  // the fifth death within a minute
  BOOST_TEST(h.restarts() == 4);
}

BOOST_AUTO_TEST_CASE(deaths_spread_wider_than_the_period_restart_forever) {
  restart_policy p;
  p.max_restarts = 2;
  p.period = seconds(10);
  restart_history h;
  auto t = restart_history::clock::time_point{} + seconds(100);
  for (int i = 0; i < 20; ++i, t += seconds(6)) {  // never 3 within 10 s
    const auto d = h.on_death(p, t);
    BOOST_TEST_REQUIRE(!d.give_up, "death " << i);
    BOOST_TEST(d.recent <= 1);
  }
  // Three within the period: the third gives up.
  BOOST_TEST(!h.on_death(p, t).give_up);
  BOOST_TEST(h.on_death(p, t + milliseconds(1)).give_up);
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
