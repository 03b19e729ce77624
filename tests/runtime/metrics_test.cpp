// Prometheus text rendering: HELP/TYPE lines, _total counters, cumulative histogram buckets
// with +Inf, _sum and _count, and escaped label values.
#define BOOST_TEST_MODULE metrics
#include <boost/test/unit_test.hpp>

#include "runtime/metrics/metrics.h"

using namespace troupe::metrics;

BOOST_AUTO_TEST_CASE(renders_the_text_exposition_format) {
  registry r;
  auto& c = r.add_counter("t_requests", "Requests.");
  auto& g = r.add_gauge("t_running", "Running.");
  auto& h = r.add_histogram("t_latency_seconds", "Latency.", {1.0, 0.1});
  c.inc({{"tenant", "a\"b\\c\nd"}}, 2);
  c.inc({{"tenant", "a\"b\\c\nd"}});
  g.set({}, 4);
  h.observe({{"m", "x"}}, 0.05);
  h.observe({{"m", "x"}}, 0.1);   // le is inclusive
  h.observe({{"m", "x"}}, 0.5);
  h.observe({{"m", "x"}}, 7.25);
  BOOST_TEST(c.value({{"tenant", "a\"b\\c\nd"}}) == 3.0);
  BOOST_TEST(h.count({{"m", "x"}}) == 4u);
  const std::string expected =
      "# HELP t_requests_total Requests.\n"
      "# TYPE t_requests_total counter\n"
      "t_requests_total{tenant=\"a\\\"b\\\\c\\nd\"} 3\n"
      "# HELP t_running Running.\n"
      "# TYPE t_running gauge\n"
      "t_running 4\n"
      "# HELP t_latency_seconds Latency.\n"
      "# TYPE t_latency_seconds histogram\n"
      "t_latency_seconds_bucket{m=\"x\",le=\"0.1\"} 2\n"
      "t_latency_seconds_bucket{m=\"x\",le=\"1\"} 3\n"
      "t_latency_seconds_bucket{m=\"x\",le=\"+Inf\"} 4\n"
      "t_latency_seconds_sum{m=\"x\"} 7.9\n"
      "t_latency_seconds_count{m=\"x\"} 4\n";
  BOOST_TEST(r.render() == expected);
}

// A client-chosen `user` became a label without bound: one 1 MiB value made every scrape 168 MB.
BOOST_AUTO_TEST_CASE(bounded_labels_count_long_and_surplus_values_as_other) {
  registry r;
  r.bound_label("tenant", {3, 8, "other"});
  auto& c = r.add_counter("t_requests", "Requests.");
  auto& h = r.add_histogram("t_latency_seconds", "Latency.", {1.0});
  c.inc({{"tenant", std::string(1 << 20, 'x')}});
  for (const char* t : {"a", "b", "c", "d", "e", "a"}) {
    c.inc({{"tenant", t}, {"model", "m"}});
    h.observe({{"tenant", t}}, 0.5);
  }
  BOOST_TEST(c.value({{"tenant", "a"}, {"model", "m"}}) == 2.0);
  BOOST_TEST(c.value({{"tenant", "other"}, {"model", "m"}}) == 2.0);  // d and e
  BOOST_TEST(c.value({{"tenant", "other"}}) == 1.0);                  // the 1 MiB one
  BOOST_TEST(h.count({{"tenant", "other"}}) == 2u);
  const std::string text = r.render();
  BOOST_TEST(text.size() < 4096u);
  BOOST_TEST(text.find("tenant=\"d\"") == std::string::npos);
  // Labels without a bound are untouched.
  c.inc({{"model", std::string(100, 'm')}});
  BOOST_TEST(c.value({{"model", std::string(100, 'm')}}) == 1.0);
}

// Bounded labels multiply (tenant x priority): a family keeps at most max_series label sets
// with bounded values of their own.
BOOST_AUTO_TEST_CASE(a_family_holds_a_bounded_number_of_series) {
  registry r;
  r.bound_label("tenant", {100, 64, "other"});
  r.bound_label("priority", {100, 64, "other"});
  auto& c = r.add_counter("t_requests", "Requests.");
  for (int t = 0; t < 50; ++t)
    for (int p = 0; p < 50; ++p) c.inc({{"tenant", std::to_string(t)}, {"priority", std::to_string(p)}});
  const std::string text = r.render();
  std::size_t lines = 0;
  for (char ch : text) lines += ch == '\n';
  BOOST_TEST(lines == 2 + label_bounds::max_series + 1);  // HELP, TYPE, the series, and "other"
  BOOST_TEST(c.value({{"tenant", "other"}, {"priority", "other"}}) == double(2500 - label_bounds::max_series));
}

// The text format escapes only \, " and newline: a NUL or another control character in a label
// value (a tenant name from a model file or an older client) would cut or corrupt the scrape.
BOOST_AUTO_TEST_CASE(control_characters_in_label_values_never_reach_the_text) {
  BOOST_TEST(escape_label(std::string("a\0b\x1b\x7f", 5)) == "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
  BOOST_TEST(escape_label("tab\there") == "tab\xef\xbf\xbdhere");
}
