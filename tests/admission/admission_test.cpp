// Admission control as pure policy: priority shares of a pool's queue, the Retry-After a full
// queue computes from its measured drain rate, tenants' token buckets (bounded in number), and
// the overload text that carries a refusal between actors.
#define BOOST_TEST_MODULE admission
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "runtime/admission/admission.h"
#include "runtime/admission/model_fallback.h"

using namespace troupe::admission;
using std::chrono::milliseconds;

BOOST_AUTO_TEST_CASE(less_important_priorities_get_a_smaller_share_of_the_queue) {
  admission_config c;
  c.max_queued = 8;
  BOOST_TEST(queue_limit(c, -5) == 8);
  BOOST_TEST(queue_limit(c, 0) == 8);
  BOOST_TEST(queue_limit(c, 1) == 6);
  BOOST_TEST(queue_limit(c, 2) == 4);
  BOOST_TEST(queue_limit(c, 3) == 2);
  BOOST_TEST(queue_limit(c, 9) == 2);  // never below min_share
  pool_queue q;
  const auto t0 = clock::now();
  for (int i = 0; i < 2; ++i) {
    BOOST_TEST(q.admit(c, 3, t0).admitted);
    q.accepted();
  }
  const verdict low = q.admit(c, 3, t0);
  BOOST_TEST(!low.admitted);  // priority 3 is shed at depth 2 ...
  BOOST_TEST(low.reason.find("2 for priority 3") != std::string::npos, low.reason);
  BOOST_TEST(low.retry_after_s == 1.0);  // no drain rate measured yet: the fallback
  BOOST_TEST(q.admit(c, 0, t0).admitted);  // ... while priority 0 still has room
}

BOOST_AUTO_TEST_CASE(retry_after_comes_from_the_measured_drain_rate) {
  admission_config c;
  c.max_queued = 4;
  pool_queue q;
  auto t = clock::now();
  for (int i = 0; i < 12; ++i) q.accepted();
  for (int i = 0; i < 8; ++i) {  // two starts a second
    q.started(t);
    t += milliseconds(500);
  }
  BOOST_TEST(q.depth() == 4);
  BOOST_TEST(q.drain_rate() == 2.0, boost::test_tools::tolerance(1e-6));
  for (int i = 0; i < 4; ++i) q.accepted();  // depth 8 against a limit of 4: 5 to go at 2/s
  const verdict v = q.admit(c, 0, t);
  BOOST_TEST(!v.admitted);
  BOOST_TEST(v.retry_after_s == 3.0);
  for (int i = 0; i < 100; ++i) q.accepted();
  BOOST_TEST(q.admit(c, 0, t).retry_after_s == 53.0);  // 105 over the limit at 2 a second
  for (int i = 0; i < 1000; ++i) q.accepted();
  BOOST_TEST(q.admit(c, 0, t).retry_after_s == 60.0);  // capped
  pool_queue unbounded;
  BOOST_TEST(unbounded.admit(admission_config{}, 9, t).admitted);
}

BOOST_AUTO_TEST_CASE(tenant_buckets_limit_requests_and_tokens_and_stay_bounded) {
  admission_config c;
  c.tenants["acme"] = {2, 2, 0};
  c.tenants["default"] = {0, 0, 600};  // 10 tokens a second, a minute's worth in the bucket
  c.max_tracked_tenants = 3;
  tenant_budgets b;
  auto t = clock::now();
  BOOST_TEST(b.charge(c, "tenant:acme", "acme", 100, t).admitted);
  BOOST_TEST(b.charge(c, "tenant:acme", "acme", 100, t).admitted);
  const verdict over = b.charge(c, "tenant:acme", "acme", 100, t);
  BOOST_TEST(!over.admitted);
  BOOST_TEST(over.reason.find("tenant 'acme'") != std::string::npos, over.reason);
  BOOST_TEST(over.retry_after_s == 1.0);
  BOOST_TEST(b.charge(c, "tenant:acme", "acme", 100, t + milliseconds(500)).admitted);  // refilled one

  BOOST_TEST(b.charge(c, "user:bob", "default", 500, t).admitted);
  const verdict tokens = b.charge(c, "user:bob", "default", 500, t);
  BOOST_TEST(!tokens.admitted);
  BOOST_TEST(tokens.retry_after_s == 40.0);  // 400 tokens missing at 10 a second
  BOOST_TEST(b.charge(c, "user:carol", "default", 500, t).admitted);  // a bucket of her own
  for (int i = 0; i < 100; ++i) b.charge(c, "user:" + std::to_string(i), "default", 1, t);
  BOOST_TEST(b.tracked() == 3u);  // a flood of users does not grow the map
  BOOST_TEST(b.charge(admission_config{}, "x", "x", 1e9, t).admitted);  // no limits configured
}

BOOST_AUTO_TEST_CASE(an_overload_refusal_travels_as_text_and_reads_back) {
  verdict v;
  v.admitted = false;
  v.retry_after_s = 7;
  v.reason = "the queue holds 9 requests";
  const std::string m = overload_message(v);
  BOOST_TEST(m == "overloaded (retry after 7 s): the queue holds 9 requests");
  BOOST_TEST(retry_after_of("router: " + m).value() == 7.0);
  BOOST_TEST(!retry_after_of("no replica can take it").has_value());
}

// A smaller model under overload (issue 29): the fallback takes a request the full queue refuses,
// or one whose pool predicts a longer wait than the target; never one that forbids it, one of a
// more important priority than the rule's class, or one already sent there.
BOOST_AUTO_TEST_CASE(a_request_falls_back_when_refused_or_its_predicted_wait_is_over_the_target) {
  using namespace troupe::admission;
  fallback_rule rule{"draft", 0.5, 1};
  const verdict ok, full{false, 2, "the queue holds 8 requests, 8 for priority 1"};
  BOOST_TEST(decide_fallback(rule, true, 1, full, std::nullopt).fall_back);
  BOOST_TEST(decide_fallback(rule, true, 1, full, std::nullopt).reason.find("queue is full") != std::string::npos);
  BOOST_TEST(!decide_fallback(rule, true, 1, ok, 0.4).fall_back);
  BOOST_TEST(decide_fallback(rule, true, 1, ok, 0.6).fall_back);
  BOOST_TEST(!decide_fallback(rule, true, 1, ok, std::nullopt).fall_back);  // no rate measured yet
  BOOST_TEST(!decide_fallback(rule, false, 1, full, 0.6).fall_back);        // forbidden (or fell back once)
  BOOST_TEST(!decide_fallback(rule, true, 0, full, 0.6).fall_back);         // more important than the class
  BOOST_TEST(!decide_fallback(fallback_rule{}, true, 1, full, 0.6).fall_back);  // no fallback model
  rule.max_queue_wait_s = 0;  // only when refused
  BOOST_TEST(!decide_fallback(rule, true, 1, ok, 100.0).fall_back);

  // The wait a queue predicts: its depth over the rate it started requests at lately, measured
  // over a window, so that a step starting ten at once does not read as a rate of thousands.
  pool_queue q;
  const auto t0 = clock::now();
  BOOST_TEST(*predicted_wait_s(q, 0, t0) == 0.0);  // nothing ahead
  q.accepted();
  BOOST_TEST(!predicted_wait_s(q, 0, t0).has_value());  // one ahead, no rate measured
  q.left();
  for (int i = 0; i < 25; ++i) q.accepted();
  for (int s = 0; s < 2; ++s)  // 10 every second, started 5 at once every half second
    for (int burst = 0; burst < 2; ++burst)
      for (int k = 0; k < 5; ++k) q.started(t0 + milliseconds(1000 * s + 500 * burst + k));
  BOOST_TEST(!predicted_wait_s(q, 0, t0 + milliseconds(100)).has_value());  // too soon after the first start to tell
  BOOST_TEST_REQUIRE(predicted_wait_s(q, 0, t0 + milliseconds(2100)).has_value());
  const double wait = *predicted_wait_s(q, 0, t0 + milliseconds(2100));
  BOOST_TEST(q.depth() == 5);
  BOOST_TEST(wait > 0.4);  // 5 ahead at about 10 a second (8 as the decayed count reads it)
  BOOST_TEST(wait < 0.8);
  BOOST_TEST(q.drain_rate() > 100.0);  // what the interval EWMA reads from the same starts
}

// A pool whose slots are all taken starts the next request only when a running one ends, however
// fast it started the ones before: the wait counts the requests that must end first over the
// rate they end at (a benchmark under 5x overload found admitted requests waiting seconds behind
// a full batch while the start rate still read as fast).
BOOST_AUTO_TEST_CASE(a_full_pool_predicts_the_wait_for_running_requests_to_end) {
  using namespace troupe::admission;
  pool_queue q;
  const auto t0 = clock::now();
  for (int i = 0; i < 8; ++i) q.accepted();
  for (int i = 0; i < 8; ++i) q.started(t0 + milliseconds(100 * i));  // 10 a second, all still running
  const auto t1 = t0 + milliseconds(800);
  BOOST_TEST(q.running() == 8);
  BOOST_TEST(q.depth() == 0);
  BOOST_TEST(*predicted_wait_s(q, 0, t1) == 0.0);   // slots unknown: nothing ahead, no wait
  BOOST_TEST(*predicted_wait_s(q, 16, t1) == 0.0);  // free slots: no wait
  BOOST_TEST(*predicted_wait_s(q, 8, t1) > 1e6);    // full, and nothing has ended yet
  q.accepted();
  q.accepted();  // two ahead: each waits for a slot
  for (int i = 0; i < 4; ++i) q.finished(t1 + milliseconds(250 * i));  // 4 a second end
  const auto t2 = t1 + milliseconds(1000);
  BOOST_TEST(q.running() == 4);
  const double wait = *predicted_wait_s(q, 5, t2);  // 1 free slot, 2 ahead: 2 must end first
  BOOST_TEST(wait > 0.2);
  BOOST_TEST(wait < 2.0);
  BOOST_TEST(wait > *predicted_wait_s(q, 0, t2));  // more than the start rate alone says
  q.lost();  // a replica died with one: its slot went with it
  BOOST_TEST(q.running() == 3);
}

// The time to first token a new request can expect: the predicted wait plus what first tokens
// took beyond their own predictions, so that the target the rule names is one for the first
// token, not only for the queue; before the start rate is measured, the requests ahead are taken
// to start one at a time (the first quarter second of a burst is not admitted blind).
BOOST_AUTO_TEST_CASE(the_predicted_time_to_first_token_learns_what_the_wait_leaves_out) {
  using namespace troupe::admission;
  pool_queue q;
  const auto t0 = clock::now();
  BOOST_TEST(*predict_first_token(q, 0, t0).ttft() == 0.0);  // nothing ahead, nothing learnt
  q.accepted();
  q.started(t0 + milliseconds(10));
  q.first_token(0.0, 0.1);  // alone: 100 ms to its first token
  BOOST_TEST(std::abs(*q.service_s() - 0.2) < 1e-9);  // one sample: twice it, until more come
  for (int i = 0; i < 3; ++i) q.accepted();
  const auto cold = predict_first_token(q, 0, t0 + milliseconds(20));
  BOOST_TEST(std::abs(*cold.wait - 0.6) < 1e-9);    // 3 ahead, one at a time
  BOOST_TEST(std::abs(*cold.ttft() - 0.8) < 1e-9);  // then its own
  q.first_token(std::nullopt, 5.0);  // admitted unpredicted: teaches nothing
  BOOST_TEST(std::abs(*q.service_s() - 0.2) < 1e-9);
  for (int i = 0; i < 20; ++i) q.first_token(0.1, 0.2);  // steady: 100 ms beyond each prediction
  BOOST_TEST(std::abs(*q.service_s() - 0.1) < 0.01);          // the first sample's doubt has gone
  q.first_token(0.2, 0.5);  // 300 ms beyond its predicted wait
  BOOST_TEST(*q.service_s() > 0.2);  // the mean moves and the deviation widens the bound
  const auto late = predict_first_token(q, 0, t0 + milliseconds(2000));  // the start rate is measured now
  BOOST_TEST(*late.wait == *predicted_wait_s(q, 0, t0 + milliseconds(2000)));
  BOOST_TEST(*late.ttft() == *late.wait + *q.service_s());
}
