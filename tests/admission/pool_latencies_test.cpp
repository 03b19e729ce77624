#define BOOST_TEST_MODULE pool_latencies
#include <boost/test/unit_test.hpp>

#include "runtime/admission/pool_latencies.h"
#include "runtime/admission/replica_figures.h"
#include "runtime/common/bounded_log.h"

// A pool's latency averages and their age, and the bounded record the owner keeps of
// migrations (and the router of its decision times).
using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(the_first_sample_is_the_average_and_later_ones_weigh_a_fifth) {
  admission::pool_latencies l;
  const admission::pool_latencies::clock::time_point t0{};
  BOOST_TEST(l.at(t0).empty());
  l.first_token("prefill", 1.0, t0);
  l.first_token("prefill", 2.0, t0 + 1s);
  const auto f = l.at(t0 + 3s);
  BOOST_TEST_REQUIRE(f.size() == 1u);
  BOOST_TEST(f[0].pool == "prefill");
  BOOST_TEST(f[0].ttft_s == 1.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(f[0].ttft_age_s == 2.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(f[0].itl_age_s == -1.0);  // no request finished there yet
  l.between_tokens("prefill", 0.05, t0 + 3s);
  BOOST_TEST(l.at(t0 + 3s)[0].itl_s == 0.05);
}

BOOST_AUTO_TEST_CASE(a_bounded_log_keeps_the_newest_in_order) {
  bounded_log<int> log(4);
  for (int i = 0; i < 4; ++i) log.push(i);
  BOOST_TEST(log.items().size() == 4u);
  log.push(4);  // full: the older half goes
  BOOST_TEST((log.items() == std::vector<int>{2, 3, 4}));
  for (int i = 5; i < 1000; ++i) log.push(i);
  BOOST_TEST(log.items().size() <= 4u);
  BOOST_TEST(log.items().back() == 999);
}

// Each replica's events, timed: a comparison takes what came after a moment, and a replica keeps
// only its latest events.
BOOST_AUTO_TEST_CASE(replica_figures_are_taken_since_a_moment_and_stay_bounded) {
  using kind = troupe::admission::figure_book::kind;
  troupe::admission::figure_book b;
  b.record(1, kind::ttft, 10.0, 0.5);
  b.record(1, kind::ttft, 20.0, 0.25);
  b.record(1, kind::itl, 20.5, 0.01);
  b.record(1, kind::finished, 21.0);
  b.record(1, kind::failed, 22.0);
  b.record(2, kind::refused, 9.0);
  const auto all = b.since(0);
  BOOST_TEST_REQUIRE(all.size() == 2u);
  BOOST_TEST(all[0].replica == 1u);
  BOOST_TEST(all[0].ttft_s == std::vector<double>({0.5, 0.25}));
  BOOST_TEST(all[1].refused == 1u);
  const auto later = b.since(15.0);
  BOOST_TEST(later[0].ttft_s == std::vector<double>({0.25}));
  BOOST_TEST(later[0].itl_s.size() == 1u);
  BOOST_TEST(later[0].finished == 1u);
  BOOST_TEST(later[0].failed == 1u);
  BOOST_TEST(later[1].refused == 0u);
  for (int i = 0; i < 10000; ++i) b.record(3, kind::finished, 30.0 + i);
  BOOST_TEST(b.since(0).back().finished == troupe::admission::figure_book::window);
}
