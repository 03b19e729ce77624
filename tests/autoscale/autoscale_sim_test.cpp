// The autoscaler actor on the sim backend over a recorded trace (tests/autoscale/
// ramp-spike-quiet.csv: 20 s ramping from 10% to 25% of the spike's rate, 20 s of spike at about
// twice one replica's capacity, 40 s quiet), replayed by `troupe bench autoscale` at three times real
// time: the real router, request owner, admin actor and autoscaler, sim replicas. It must scale
// up within its reaction bound of the spike, never shrink and grow again (no flapping), be back
// at min_replicas 30 s after the last request, and lose no request.
#define BOOST_TEST_MODULE autoscale_sim
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"

using json = nlohmann::json;

BOOST_AUTO_TEST_CASE(a_spike_scales_up_in_time_without_flapping_and_quiet_returns_to_min) {
  const std::string src = TROUPE_SOURCE_DIR;
  const auto r = troupe::test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench autoscale --config " + src +
                                           "/configs/autoscale-sim.toml --trace " + src +
                                           "/tests/autoscale/ramp-spike-quiet.csv --speedup 3 --settle 30 --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const json j = json::parse(r.output);
  BOOST_TEST(j["failed"].get<int>() == 0);
  BOOST_TEST(j["requests"].get<int>() > 900);
  const double spike = 20, spike_end = 40;
  // The bound: the signal must hold up_for, the autoscaler looks every interval and its status
  // is one interval old at worst; 4 s more for the queue to build and for this loaded machine.
  const double bound = j["policy"]["up_for_s"].get<double>() + 2 * j["policy"]["interval_s"].get<double>() + 4;
  int before_spike = 0, peak = 0, last = 0;
  double first_up = -1;
  bool went_down = false;
  for (const auto& c : j["changes"]) {
    const double at = c["at_s"];
    const int n = c["serving"];
    if (at <= spike) before_spike = n;
    if (at > spike && n > before_spike && first_up < 0) first_up = at;
    if (n < last) went_down = true;
    BOOST_TEST(!(went_down && n > last), "grew again at " << at << " s after shrinking: " << j["changes"].dump());
    peak = std::max(peak, n);
    last = n;
  }
  BOOST_TEST(first_up > 0, "no scale-up during the spike: " << j["changes"].dump());
  BOOST_TEST(first_up <= spike + bound, "scaled up " << first_up - spike << " s into the spike; bound " << bound << " s");
  BOOST_TEST(first_up < spike_end);
  BOOST_TEST(peak <= j["max_replicas"].get<int>());
  BOOST_TEST(j["final_replicas"].get<int>() == j["min_replicas"].get<int>(), j["changes"].dump());
}
