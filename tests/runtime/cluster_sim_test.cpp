// The cluster simulation (runtime/sim/cluster_sim.h) against figures worked out by hand: step
// counts and times from the scheduler's budget and chunk, tokens one step apart, prefix hits
// that shorten a prompt's work, kv_aware routing to the replica holding a prefix, preemption
// when KV runs out, refusals of what cannot run, the KV handoff of a disaggregated pair, loads
// seen as last reported, and admission's bounded queue. And the step profile fitted to measured
// steps (runtime/sim/step_fit.h): a profile is recovered from steps it generated, no coefficient
// goes negative, `troupe bench engine --json` output gives its samples, and the profile file
// round-trips and refuses what it cannot use.
#define BOOST_TEST_MODULE cluster_sim
#include <boost/test/unit_test.hpp>

#include <set>

#include "runtime/common/error.h"
#include "runtime/sim/cluster_sim.h"
#include "runtime/sim/planner.h"
#include "runtime/sim/step_fit.h"

#include <nlohmann/json.hpp>

using namespace troupe;
using namespace troupe::sim;

namespace {

sim_request request(double at, int prompt, int output, std::size_t index, std::vector<std::int64_t> shared = {}) {
  return {at, prompt, output, sim_prompt_blocks(shared, 512, index, prompt, 16)};
}

sim_config one_replica() {
  sim_config c;
  c.sched.max_num_batched_tokens = 2048;
  c.sched.long_prefill_chunk = 512;
  c.sched.block_size = 16;
  c.kv_blocks = 1024;
  return c;
}

constexpr double ms = 1e-3;

}  // namespace

BOOST_AUTO_TEST_CASE(a_request_takes_one_step_per_token_after_its_prefill) {
  const step_profile p{1 * ms, 0, 0};  // every step 1 ms
  const std::vector<sim_request> reqs = {request(0.5, 64, 4, 0)};
  const auto r = simulate(one_replica(), p, reqs);
  BOOST_TEST(r.requests[0].ttft_s == 1 * ms, boost::test_tools::tolerance(1e-12));  // the prefill step yields the first token
  BOOST_TEST(r.requests[0].e2e_s == 4 * ms, boost::test_tools::tolerance(1e-12));   // then one step per token
  BOOST_TEST(r.requests[0].mean_itl_s == 1 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.steps == 4u);
  BOOST_TEST(r.end_s == 0.5 + 4 * ms, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_long_prompt_is_prefilled_in_chunks_priced_by_tokens_and_context) {
  // 1,200 tokens in chunks of 512: 512, 512, 176 -> three steps before the first token.
  const step_profile p{1 * ms, 1e-6, 0};
  const std::vector<sim_request> reqs = {request(0, 1200, 2, 0)};
  const auto r = simulate(one_replica(), p, reqs);
  BOOST_TEST(r.requests[0].ttft_s == 3 * ms + 1200e-6, boost::test_tools::tolerance(1e-9));
  // Attention's reads: a chunk of n tokens after c computed reads n*c + n(n+1)/2 positions.
  const step_profile reads{0, 0, 1e-9};
  const auto q = simulate(one_replica(), reads, reqs);
  const double chunks = (512.0 * 513 / 2) + (512.0 * 512 + 512.0 * 513 / 2) + (176.0 * 1024 + 176.0 * 177 / 2);
  BOOST_TEST(q.requests[0].ttft_s == chunks * 1e-9, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_shared_prefix_is_found_in_the_cache_and_not_computed_again) {
  const step_profile p{0, 1e-6, 0};  // time is tokens
  // Two prompts of 1,024 tokens sharing their first 512 (one Mooncake block), the second after
  // the first has finished.
  const std::vector<sim_request> reqs = {request(0, 1024, 1, 0, {7}), request(1.0, 1024, 1, 1, {7})};
  const auto r = simulate(one_replica(), p, reqs);
  BOOST_TEST(r.requests[0].cached_tokens == 0);
  BOOST_TEST(r.requests[1].cached_tokens == 512);
  BOOST_TEST(r.requests[1].ttft_s == 512e-6, boost::test_tools::tolerance(1e-12));
  auto off = one_replica();
  off.prefix_caching = false;
  BOOST_TEST(simulate(off, p, reqs).requests[1].cached_tokens == 0);
}

BOOST_AUTO_TEST_CASE(kv_aware_routing_sends_a_prefix_to_the_replica_that_holds_it) {
  const step_profile p{1 * ms, 1e-6, 0};
  auto c = one_replica();
  c.replicas = 4;
  c.policy = "kv_aware";
  // Requests 10 ms apart, each decoding for 200 steps, so replicas are busy when the next comes:
  // 0 and 1 go to the idle replicas 0 and 1; 2..5 share 0's or 1's first 512 tokens, whose
  // replica then costs 512 tokens less than an idle one (kv_aware's defaults: a token 1/256, a
  // running request 1).
  std::vector<sim_request> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(request(i * 10 * ms, 1024, 200, std::size_t(i), {100 + i % 2}));
  const auto r = simulate(c, p, reqs);
  BOOST_TEST(r.requests[0].replica != r.requests[1].replica);
  for (int i = 2; i < 6; ++i) {
    BOOST_TEST(r.requests[std::size_t(i)].replica == r.requests[std::size_t(i % 2)].replica, "request " << i);
    BOOST_TEST(r.requests[std::size_t(i)].cached_tokens == 512);
  }
  c.policy = "least_loaded";  // blind to the cache: the idle replicas take 2 and 3
  const auto ll = simulate(c, p, reqs);
  BOOST_TEST(ll.requests[2].replica != ll.requests[0].replica);
  BOOST_TEST(ll.requests[2].cached_tokens == 0);
}

BOOST_AUTO_TEST_CASE(kv_aware_asks_fewer_caches_and_chooses_as_if_it_asked_them_all) {
  // 16 replicas, 200 requests over 8 system prompts of 2 Mooncake blocks, prompts of 200 to
  // 1,400 tokens, kept busy: with the lookups bounded every request lands where asking every
  // replica's cache sends it, with the same times.
  const step_profile p{1 * ms, 20e-6, 0};
  auto c = one_replica();
  c.replicas = 16;
  c.policy = "kv_aware";
  c.kv_blocks = 256;  // small enough to evict
  std::vector<sim_request> reqs;
  for (int i = 0; i < 200; ++i)
    reqs.push_back(request(i * 2 * ms, 200 + (i * 379) % 1200, 8 + i % 24, std::size_t(i), {std::int64_t(i % 8), 50 + std::int64_t(i % 8)}));
  const auto bounded = simulate(c, p, reqs);
  c.bound_prefix_lookups = false;
  const auto every = simulate(c, p, reqs);
  int hits = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    BOOST_TEST(bounded.requests[i].replica == every.requests[i].replica, "request " << i);
    BOOST_TEST(bounded.requests[i].e2e_s == every.requests[i].e2e_s);
    hits += bounded.requests[i].cached_tokens > 0;
  }
  BOOST_TEST(hits > 100);  // the prefixes were found: the case tests the lookups
}

BOOST_AUTO_TEST_CASE(when_kv_runs_out_requests_are_preempted_and_still_finish) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.kv_blocks = 24;  // 384 tokens: two 128-token prompts, not their growth to 256 each
  std::vector<sim_request> reqs = {request(0, 128, 120, 0), request(0, 128, 120, 1)};
  const auto r = simulate(c, p, reqs);
  BOOST_TEST(r.requests[0].preemptions + r.requests[1].preemptions > 0);
  for (const auto& o : r.requests) BOOST_TEST(o.e2e_s > 0);
}

BOOST_AUTO_TEST_CASE(what_cannot_run_is_refused) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.kv_blocks = 4;
  const std::vector<sim_request> big = {request(0, 1000, 1, 0)};
  BOOST_CHECK_THROW(simulate(c, p, big), input_error);
  c = one_replica();
  c.policy = "no_such_policy";
  BOOST_CHECK_THROW(simulate(c, p, big), input_error);
  const std::vector<sim_request> backwards = {request(1, 10, 1, 0), request(0, 10, 1, 1)};
  BOOST_CHECK_THROW(simulate(one_replica(), p, backwards), input_error);
}

BOOST_AUTO_TEST_CASE(a_full_replica_queues_in_arrival_order_and_the_router_sees_the_queue) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.sched.max_num_seqs = 2;
  // Five 10-token answers at once on one replica with two sequence slots. 0 starts a step as it
  // arrives, so 1 joins the next (first token at 2 ms); each then takes 10 steps, its prefill
  // step yielding its first token. 2 takes 0's slot when 0 ends at 10 ms, 3 takes 1's at 11 ms,
  // and 4 takes 2's at 20 ms: later arrivals never overtake.
  std::vector<sim_request> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(request(0, 32, 10, std::size_t(i)));
  const auto r = simulate(c, p, reqs);
  const double first[] = {1, 2, 11, 12, 21};
  for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(r.requests[i].ttft_s == first[i] * ms, boost::test_tools::tolerance(1e-12));
  // Two replicas, least_loaded: 0 and 1 fill replica 0 and 1; 2 then goes where the queue is
  // shorter, and with both queues even, the next goes to the other one.
  c.replicas = 2;
  c.sched.max_num_seqs = 1;
  const auto two = simulate(c, p, reqs);
  BOOST_TEST(two.requests[0].replica != two.requests[1].replica);
  BOOST_TEST(two.requests[2].replica != two.requests[3].replica);
}

BOOST_AUTO_TEST_CASE(disaggregated_the_kv_travels_to_a_decode_replica_after_the_first_token) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.replicas = 3;
  c.prefill_replicas = 1;
  c.transfer = {5 * ms, 1e-6};  // 5 ms and 1 µs per token: 64 tokens arrive 5.064 ms later
  const std::vector<sim_request> reqs = {request(0, 64, 4, 0), request(0, 64, 4, 1)};
  const auto r = simulate(c, p, reqs);
  // Prefill: 0's prompt in the step it arrived to (1 ms), 1's in the next (2 ms). Then each
  // decodes on its own decode replica from its arrival there, one step per token.
  BOOST_TEST(r.requests[0].ttft_s == 1 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.requests[1].ttft_s == 2 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.requests[0].e2e_s == (1 + 5.064 + 3) * ms, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.requests[1].e2e_s == (2 + 5.064 + 3) * ms, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(r.requests[0].replica == 0u);  // computed by the prefill replica
  BOOST_TEST(r.steps == 8u);                 // two prefills, six decode steps (no recompute)
  c.prefill_replicas = 3;                    // nothing left to decode
  BOOST_CHECK_THROW(simulate(c, p, reqs), input_error);
}

BOOST_AUTO_TEST_CASE(the_router_sees_loads_as_last_reported_plus_its_own_placements) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.replicas = 2;
  // 0 runs on replica 0 and ends at 2 ms; 1 comes at 100 ms. Seeing loads as they are, the
  // router finds both idle and takes the first; with reports every 10 s, it still counts 0 on
  // replica 0 (its own placement since the report at 0) and sends 1 to replica 1.
  const std::vector<sim_request> reqs = {request(0, 32, 2, 0), request(0.1, 32, 2, 1)};
  BOOST_TEST(simulate(c, p, reqs).requests[1].replica == 0u);
  c.report_interval_s = 10;
  BOOST_TEST(simulate(c, p, reqs).requests[1].replica == 1u);
}

BOOST_AUTO_TEST_CASE(decode_steps_pay_the_decode_term_and_first_tokens_the_frontend) {
  const step_profile p{1 * ms, 0, 0, 0.5 * ms};  // a decode token costs 0.5 ms more than a prompt token
  auto c = one_replica();
  c.first_token_s = 2 * ms;
  const std::vector<sim_request> reqs = {request(0, 64, 3, 0)};
  const auto r = simulate(c, p, reqs);
  // Prefill 1 ms, two decode steps of 1.5 ms; the frontend adds 2 ms before the client sees any.
  BOOST_TEST(r.requests[0].ttft_s == 3 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.requests[0].e2e_s == 6 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.requests[0].mean_itl_s == 1.5 * ms, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_streams_cost_weighs_on_a_short_answer_most) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.stream_s = 3 * ms;  // its last token reaches the client 3 ms after it was computed
  const std::vector<sim_request> reqs = {request(0, 64, 4, 0), request(1, 64, 31, 1), request(2, 64, 1, 2)};
  const auto r = simulate(c, p, reqs);
  BOOST_TEST(r.requests[0].mean_itl_s == 2 * ms, boost::test_tools::tolerance(1e-12));  // (3 steps + 3 ms) / 3
  BOOST_TEST(r.requests[1].mean_itl_s == 1.1 * ms, boost::test_tools::tolerance(1e-12));  // (30 steps + 3 ms) / 30
  BOOST_TEST(r.requests[0].e2e_s == 7 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.requests[0].ttft_s == 1 * ms, boost::test_tools::tolerance(1e-12));  // the first token is not held
  BOOST_TEST(r.requests[2].e2e_s == 1 * ms, boost::test_tools::tolerance(1e-12));  // one token: no stream after it
}

BOOST_AUTO_TEST_CASE(each_request_draws_its_own_spread_by_its_index_and_no_token_comes_before_its_step) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.first_token_s = 2 * ms;
  c.first_token_jitter_s = {-1 * ms, 1 * ms, -5 * ms};  // the last would put a token before its step
  c.itl_jitter_s = {0.5 * ms, 0.25 * ms, -2 * ms};  // the last would put tokens before their steps
  std::vector<sim_request> reqs;
  for (int i = 0; i < 40; ++i) reqs.push_back(request(i, 64, 5, std::size_t(i)));  // alone: 1 ms steps
  const auto r = simulate(c, p, reqs);
  std::set<double> ttfts, itls;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const auto& o = r.requests[i];
    ttfts.insert(std::round(o.ttft_s * 1e6) / 1e6);
    itls.insert(std::round(o.mean_itl_s * 1e6) / 1e6);
    BOOST_TEST(o.ttft_s >= 1 * ms - 1e-12);     // its prefill's step
    BOOST_TEST(o.mean_itl_s >= 1 * ms - 1e-12);  // its decode steps'
    BOOST_TEST(o.e2e_s >= o.ttft_s + 4 * o.mean_itl_s - 1e-9);
  }
  // 2 ms less 1, plus 1, or held at the step (1 ms); 1 ms a token plus 0.5, plus 0.25, or held
  // at its steps' (1 ms).
  BOOST_TEST((ttfts == std::set<double>{1e-3 + 1e-3, 1e-3 + 3e-3, 1e-3}));
  BOOST_TEST((itls == std::set<double>{1.5e-3, 1.25e-3, 1e-3}));
  // The same requests draw the same.
  const auto again = simulate(c, p, reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(again.requests[i].ttft_s == r.requests[i].ttft_s);
}

BOOST_AUTO_TEST_CASE(a_full_queue_refuses_and_what_was_refused_never_runs) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.max_queued = 1;  // one request without a first token at a time
  // 0 is queued until its first token at 1 ms: 1 and 2 at the same instant find the queue full;
  // 3, after it, is taken.
  const std::vector<sim_request> reqs = {request(0, 32, 2, 0), request(0, 32, 2, 1), request(0, 32, 2, 2), request(0.5, 32, 2, 3)};
  const auto r = simulate(c, p, reqs);
  BOOST_TEST(r.refused == 2u);
  BOOST_TEST(!r.requests[0].refused);
  BOOST_TEST(r.requests[1].refused);
  BOOST_TEST(r.requests[2].refused);
  BOOST_TEST(!r.requests[3].refused);
  BOOST_TEST(r.requests[3].ttft_s == 1 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r.steps == 4u);  // two requests of two tokens
}

BOOST_AUTO_TEST_CASE(replicas_sharing_a_device_take_turns_step_by_step) {
  const step_profile p{1 * ms, 0, 0};
  auto c = one_replica();
  c.replicas = 2;
  const std::vector<sim_request> reqs = {request(0, 32, 3, 0), request(0, 32, 3, 1)};
  const auto apart = simulate(c, p, reqs);
  BOOST_TEST(apart.requests[1].e2e_s == 3 * ms, boost::test_tools::tolerance(1e-12));  // each on its own
  c.device = {0, 0};
  // 0 steps at 0-1, 2-3, 4-5 ms; 1 waits for its turns at 1-2, 3-4, 5-6.
  const auto shared = simulate(c, p, reqs);
  BOOST_TEST(shared.requests[0].replica != shared.requests[1].replica);
  BOOST_TEST(shared.requests[0].ttft_s == 1 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(shared.requests[1].ttft_s == 2 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(shared.requests[0].e2e_s == 5 * ms, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(shared.requests[1].e2e_s == 6 * ms, boost::test_tools::tolerance(1e-12));
  c.device = {0};
  BOOST_CHECK_THROW(simulate(c, p, reqs), input_error);
}

BOOST_AUTO_TEST_CASE(the_autoscaler_adds_replicas_under_a_burst_and_drains_them_after) {
  const step_profile p{1 * ms, 50e-6, 0};
  auto c = one_replica();
  c.replicas = 1;
  c.autoscale.enabled = true;
  c.autoscale.interval = std::chrono::milliseconds(100);
  c.autoscale.queue_up = 2;
  c.autoscale.up_for = std::chrono::milliseconds(200);
  c.autoscale.down_for = std::chrono::milliseconds(1000);
  c.autoscale.cooldown = std::chrono::milliseconds(300);
  c.autoscale_max = 4;
  c.replica_start_s = 0.5;
  c.sched.max_num_seqs = 4;
  // 3 seconds of 40 requests/s of 400-token prompts (about 2 replicas' worth), then one request
  // every 2 s for 10 s.
  std::vector<sim_request> reqs;
  for (int i = 0; i < 120; ++i) reqs.push_back(request(i * 0.025, 400, 40, std::size_t(i)));
  for (int i = 0; i < 5; ++i) reqs.push_back(request(4.0 + 2 * i, 400, 40, std::size_t(120 + i)));
  const auto r = simulate(c, p, reqs);
  BOOST_TEST_REQUIRE(!r.scaling.empty());
  BOOST_TEST(r.scaling.front().to > 1);                 // up, under the burst
  BOOST_TEST(r.scaling.front().at_s < 3.0);
  BOOST_TEST(r.scaling.back().to < r.scaling.back().from);  // and down once it is over
  BOOST_TEST(r.scaling.back().at_s > 3.0);
  std::set<std::uint32_t> used;
  for (const auto& o : r.requests) {
    BOOST_TEST(o.e2e_s > 0);
    used.insert(o.replica);
  }
  BOOST_TEST(used.size() > 1u);  // the replicas it started took requests
  // Provisioned for less than the largest pool all along, more than the smallest.
  BOOST_TEST(r.replica_seconds < 4 * r.end_s);
  BOOST_TEST(r.replica_seconds > r.end_s);
  // A replica added serves only once started: none took a request in its first 0.5 s.
  for (std::size_t i = 0; i < reqs.size(); ++i)
    if (r.requests[i].replica != 0) BOOST_TEST(reqs[i].arrival_s >= r.scaling.front().at_s + 0.5 - 1e-9, "request " << i);
  auto fixed = c;
  fixed.autoscale.enabled = false;
  const auto one = simulate(fixed, p, reqs);
  BOOST_TEST(one.scaling.empty());
  BOOST_TEST(one.replica_seconds == one.end_s - reqs.front().arrival_s, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_SUITE(step_fit)

namespace fitting {

std::vector<step_sample> generated(const step_profile& p) {
  std::vector<step_sample> out;
  for (std::int64_t b : {1, 4, 16, 32}) out.push_back({b, b * 129, p.seconds(b, b * 129)});  // decode at context 128
  out.push_back({512, 512 * 513 / 2, p.seconds(512, 512 * 513 / 2)});                      // one prefill
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fitting

BOOST_AUTO_TEST_CASE(a_profile_is_recovered_from_the_steps_it_timed) {
  const step_profile truth{2e-3, 50e-6, 3e-9};
  const step_profile fit = fit_step_profile(fitting::generated(truth));
  BOOST_TEST(fit.base_s == truth.base_s, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(fit.per_token_s == truth.per_token_s, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(fit.per_context_s == truth.per_context_s, boost::test_tools::tolerance(1e-6));
  const auto file = fit_profile_file(fitting::generated(truth), "test");
  BOOST_TEST(file.worst_error < 1e-6);
  BOOST_TEST(file.samples == 5u);
}

// Steps measured on models/kjv (troupe bench engine, 2026-12-05): decode batches of 0.26 to
// 4.4 ms and a 44 ms prefill. Fitted by absolute error the prefill decides alone and batch 1 is
// predicted at twice its time (worst error 128%); fitted by relative error every step counts.
BOOST_AUTO_TEST_CASE(small_steps_count_as_much_as_large_ones) {
  const std::vector<step_sample> kjv = {
      {1, 129, 0.26e-3}, {4, 516, 0.53e-3}, {16, 2064, 2.02e-3}, {32, 4128, 4.43e-3}, {512, 512 * 513 / 2, 44.4e-3}};
  const auto f = fit_profile_file(kjv, "kjv");
  BOOST_TEST(f.worst_error < 0.3);
  BOOST_TEST(f.step.seconds(1, 129) < 0.26e-3 * 1.3);
}

BOOST_AUTO_TEST_CASE(decode_tokens_get_a_cost_of_their_own_and_the_same_measurements_give_it) {
  // The kjv steps as bench engine's JSON gives them (decode rows at context 128 are decode
  // tokens): decode costs more per token than the prefill, so a fit with the decode term is
  // closer than one without, and predicts batch 1 within 15%.
  nlohmann::json bench{{"prefill", {{"tokens", 512}, {"tokens_per_second", 512 / 44.4e-3}}}, {"decode", nlohmann::json::array()}};
  for (auto [b, ms] : {std::pair{1, 0.26}, {4, 0.53}, {16, 2.02}, {32, 4.43}})
    bench["decode"].push_back({{"batch", b}, {"context", 128}, {"step_ms", ms}});
  const auto samples = engine_bench_samples(bench, "kjv.json");
  BOOST_TEST(samples[1].decode_tokens == 1);
  const auto with = fit_profile_file(samples, "kjv");
  auto without = samples;
  for (auto& x : without) x.decode_tokens = 0;
  BOOST_TEST(with.worst_error < fit_profile_file(without, "kjv").worst_error);
  BOOST_TEST(with.step.per_decode_token_s > 0);
  BOOST_TEST(with.step.seconds(1, 129, 1) == 0.26e-3, boost::test_tools::tolerance(0.15));
  // And a truth with every term is recovered from steps that vary each.
  const step_profile truth{1e-3, 40e-6, 2e-9, 30e-6};
  std::vector<step_sample> varied;
  for (std::int64_t b : {1, 8, 32})
    for (std::int64_t c : {64, 512}) varied.push_back({b, b * (c + 1), truth.seconds(b, b * (c + 1), b), b});
  for (std::int64_t p : {128, 512}) varied.push_back({p, p * (p + 1) / 2, truth.seconds(p, p * (p + 1) / 2), 0});
  const step_profile fit = fit_step_profile(varied);
  BOOST_TEST(fit.per_decode_token_s == truth.per_decode_token_s, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(fit.per_context_s == truth.per_context_s, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(no_coefficient_goes_negative) {
  // Steps that get cheaper with more tokens (noise, a warm cache): an unconstrained fit gives a
  // negative cost per token; the fit drops that term and keeps the rest.
  const std::vector<step_sample> s = {{1, 100, 5e-3}, {8, 800, 4.5e-3}, {32, 3200, 4e-3}};
  const step_profile fit = fit_step_profile(s);
  BOOST_TEST(fit.base_s > 0);
  BOOST_TEST(fit.per_token_s >= 0);
  BOOST_TEST(fit.per_context_s >= 0);
  BOOST_TEST(fit.seconds(8, 800) > 0);
  BOOST_TEST(fitting::error_of([] { fit_step_profile(std::vector<step_sample>{}); }).find("no measured step") != std::string::npos);
  BOOST_TEST(fitting::error_of([] { fit_step_profile(std::vector<step_sample>{{4, 10, -1}}); }).find("positive") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(troupe_bench_engine_json_gives_its_steps) {
  const auto bench = nlohmann::json::parse(R"({"prefill": {"tokens": 512, "tokens_per_second": 1024},
    "decode": [{"batch": 1, "context": 128, "step_ms": 20}, {"batch": 16, "context": 128, "step_ms": 30}]})");
  const auto s = engine_bench_samples(bench, "b.json");
  BOOST_TEST_REQUIRE(s.size() == 3u);
  BOOST_TEST(s[0].tokens == 512);
  BOOST_TEST(s[0].context_reads == 512 * 513 / 2);
  BOOST_TEST(s[0].seconds == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s[2].tokens == 16);
  BOOST_TEST(s[2].context_reads == 16 * 129);
  BOOST_TEST(s[2].seconds == 0.03, boost::test_tools::tolerance(1e-12));
  // --fit-profile's shorter prefills are steps too: with them the context term is found.
  auto lengths = bench;
  const step_profile truth{1e-3, 50e-6, 20e-9, 0};
  lengths["prefill"]["tokens_per_second"] = 512 / truth.seconds(512, 512 * 513 / 2);
  lengths["prefill_fit"] = nlohmann::json::array();
  for (std::int64_t n : {128, 256}) lengths["prefill_fit"].push_back({{"tokens", n}, {"seconds", truth.seconds(n, n * (n + 1) / 2)}});
  lengths["decode"] = nlohmann::json::array();
  for (std::int64_t b : {1, 16}) lengths["decode"].push_back({{"batch", b}, {"context", 128}, {"step_ms", truth.seconds(b, b * 129) * 1e3}});
  const auto ls = engine_bench_samples(lengths, "b.json");
  BOOST_TEST_REQUIRE(ls.size() == 5u);
  BOOST_TEST(ls[1].tokens == 128);
  BOOST_TEST(ls[1].context_reads == 128 * 129 / 2);
  BOOST_TEST(fit_step_profile(ls).per_context_s == truth.per_context_s, boost::test_tools::tolerance(1e-6));
  auto broken = bench;
  broken["decode"][1].erase("step_ms");
  BOOST_TEST(fitting::error_of([&] { engine_bench_samples(broken, "b.json"); }).find("b.json: decode[].step_ms") != std::string::npos);
  BOOST_TEST(fitting::error_of([] { engine_bench_samples(nlohmann::json::object(), "x.json"); }).find("x.json: no prefill") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_profile_file_round_trips_and_names_what_is_wrong) {
  const auto f = fit_profile_file(fitting::generated({1e-3, 20e-6, 1e-9}), "bench engine on models/kjv");
  const auto back = parse_profile_file(format_profile_file(f), "p.json");
  BOOST_TEST(back.step.base_s == f.step.base_s);
  BOOST_TEST(back.step.per_token_s == f.step.per_token_s);
  BOOST_TEST(back.step.per_context_s == f.step.per_context_s);
  BOOST_TEST(back.source == "bench engine on models/kjv");
  BOOST_TEST(fitting::error_of([] { parse_profile_file("{", "p.json"); }).find("p.json: not JSON") != std::string::npos);
  BOOST_TEST(fitting::error_of([] { parse_profile_file(R"({"step": {"base_s": 1, "per_token_s": -1, "per_context_s": 0}})", "p.json"); })
                 .find("step.per_token_s") != std::string::npos);
  BOOST_TEST(fitting::error_of([] { parse_profile_file(R"({"step": {"base_s": 0, "per_token_s": 0, "per_context_s": 0}})", "p.json"); })
                 .find("no time") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_transfer_fit_prices_a_token_by_the_models_kv_bytes) {
  // Pulls timed at 50 µs + 0.1 ns per byte (10 GB/s).
  std::vector<transfer_sample> pulls;
  for (double mib : {1.0, 4.0, 16.0, 64.0}) pulls.push_back({mib * 1048576, 50e-6 + mib * 1048576 * 1e-10});
  auto f = fit_profile_file(fitting::generated({1e-3, 20e-6, 1e-9}), "bench engine");
  BOOST_TEST(fitting::error_of([&] { f.transfer_cost("p.json"); }).find("troupe bench kv-transfer --fit-profile p.json") != std::string::npos);
  f.transfer = fit_transfer(pulls, "tcp");
  BOOST_TEST(f.transfer->base_s == 50e-6, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(f.transfer->per_byte_s == 1e-10, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(fitting::error_of([&] { f.transfer_cost("p.json"); }).find("kv_bytes_per_token") != std::string::npos);
  f.kv_bytes_per_token = 32768;
  f.tensor_parallel = 2;
  const auto back = parse_profile_file(format_profile_file(f), "p.json");
  BOOST_TEST(back.tensor_parallel == 2);
  BOOST_TEST(back.transfer->source == "tcp");
  BOOST_TEST(back.transfer_cost("p.json").per_token_s == 32768 * 1e-10, boost::test_tools::tolerance(1e-6));
  // What serving adds (troupe bench serve --fit-profile): to every step, and to first tokens.
  f.step.per_decode_token_s = 7e-6;
  f.serving = profile_file::serving_fit{0.2e-3, 5e-3, "bench serve"};
  const auto served = parse_profile_file(format_profile_file(f), "p.json");
  BOOST_TEST(served.step.per_decode_token_s == 7e-6);
  BOOST_TEST(served.serving->first_token_s == 5e-3);
  BOOST_TEST(served.served_step().base_s == f.step.base_s + 0.2e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(served.serving->handoff_s == 0.0);  // none fitted: the copy alone
  BOOST_TEST(served.transfer_cost("p.json").base_s == f.transfer->base_s, boost::test_tools::tolerance(1e-9));
  // A disaggregated server's handoff (troupe bench serve --fit-profile against one) adds to every transfer.
  f.serving->handoff_s = 1.5e-3;
  const auto handed = parse_profile_file(format_profile_file(f), "p.json");
  BOOST_TEST(handed.serving->handoff_s == 1.5e-3);
  BOOST_TEST(handed.transfer_cost("p.json").base_s == f.transfer->base_s + 1.5e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(fitting::error_of([] {
               parse_profile_file(R"({"step": {"base_s": 1, "per_token_s": 0, "per_context_s": 0},
                                      "serving": {"step_s": 0, "first_token_s": 0, "handoff_s": -1}})", "p.json");
             }).find("serving.handoff_s") != std::string::npos);
  BOOST_TEST(fitting::error_of([] { parse_profile_file(R"({"step": {"base_s": 1, "per_token_s": 0, "per_context_s": 0}, "tensor_parallel": 0})", "p.json"); })
                 .find("tensor_parallel") != std::string::npos);
}

namespace {

// Requests served at concurrency 1 on a forward `fwd`, where serving adds `step_s` per decode
// step, `stream_s` per request and `first_s` to its first token; answers of `outputs` tokens.
std::vector<served_request> served_on(const step_profile& fwd, double step_s, double stream_s, double first_s, const std::vector<int>& outputs) {
  std::vector<served_request> out;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    served_request r;
    r.prompt_tokens = 100 + 20 * std::int64_t(i);
    r.output_tokens = outputs[i];
    r.ttft_s = fwd.seconds(r.prompt_tokens, r.prompt_tokens * (r.prompt_tokens + 1) / 2) + first_s;
    double decode = 0;
    for (int t = 1; t < r.output_tokens; ++t) decode += fwd.seconds(1, r.prompt_tokens + r.output_tokens / 2 + 1, 1) + step_s;
    r.e2e_s = r.ttft_s + decode + stream_s;
    out.push_back(r);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_serving_fit_tells_a_streams_cost_from_a_steps_and_a_few_slow_requests_move_neither) {
  profile_file p;
  p.step = {0.1 * ms, 50e-6, 0, 30e-6};
  // 0.2 ms a step, 2.5 ms a stream, 4 ms a first token, over answers of 16 to 128 tokens.
  auto served = served_on(p.step, 0.2 * ms, 2.5 * ms, 4 * ms, {16, 24, 40, 64, 96, 128, 20, 50, 80, 110});
  served[3].e2e_s += 30 * ms;  // two requests the machine slowed
  served[7].e2e_s += 10 * ms;
  const auto f = fit_serving(p, served, "bench serve");
  BOOST_TEST(f.step_s == 0.2 * ms, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(f.stream_s == 2.5 * ms, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(f.first_token_s == 4 * ms, boost::test_tools::tolerance(1e-6));
  // One length only: the stream cannot be told from the steps; it is spread over them.
  const auto same = fit_serving(p, served_on(p.step, 0.2 * ms, 2.5 * ms, 4 * ms, {33, 33, 33}), "bench serve");
  BOOST_TEST(same.stream_s == 0.0);
  BOOST_TEST(same.step_s == 0.2 * ms + 2.5 * ms / 32, boost::test_tools::tolerance(1e-6));
  // Each request's spread about those: none but the two slowed ones' inter-token times.
  BOOST_TEST_REQUIRE(f.itl_jitter_s.size() == served.size());
  BOOST_TEST(f.itl_jitter_s[3] == 30 * ms / 63, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(f.itl_jitter_s[7] == 10 * ms / 49, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(std::abs(f.itl_jitter_s[0]) < 1e-9);
  BOOST_TEST(std::abs(f.first_token_jitter_s[5]) < 1e-9);
  // Kept in the file, and priced into the simulator with the first token's.
  p.serving = f;
  const auto back = parse_profile_file(format_profile_file(p), "p.json");
  BOOST_TEST(back.serving->stream_s == f.stream_s, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(back.serving->itl_jitter_s.size() == served.size());
  sim_config c;
  back.price_serving(c);
  BOOST_TEST(c.stream_s == f.stream_s, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(c.first_token_s == f.first_token_s, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(c.itl_jitter_s[3] == f.itl_jitter_s[3], boost::test_tools::tolerance(1e-12));
  BOOST_TEST(fitting::error_of([] {
               parse_profile_file(R"({"step": {"base_s": 1, "per_token_s": 0, "per_context_s": 0},
                                      "serving": {"step_s": 0, "first_token_s": 0, "itl_jitter_s": [0.1, "x"]}})", "p.json");
             }).find("serving.itl_jitter_s") != std::string::npos);
  // A disaggregated server's handoff is what its requests take beyond steps, stream and copy.
  p.kv_bytes_per_token = 1000;
  p.transfer = transfer_fit{0, 1e-9, "inproc"};  // 1 µs a token
  auto handed = served_on(p.served_step(), 0, 2.5 * ms, 4 * ms, {16, 64, 128});
  for (auto& r : handed) r.e2e_s += 1.5 * ms + double(r.prompt_tokens) * 1e-6;
  BOOST_TEST(fit_handoff(p, handed, "p.json") == 1.5 * ms, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(planning)

namespace {

std::string plan_error(const std::string& spec) {
  try {
    parse_slo(spec);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

// 100 requests at 40 a second: prompts of 200 to 1,600 tokens, answers of 10 to 200.
std::vector<sim_request> small_trace() {
  std::vector<sim_request> out;
  for (int i = 0; i < 100; ++i)
    out.push_back(request(i / 40.0, 200 + (i * 613) % 1400, 10 + (i * 89) % 190, std::size_t(i)));
  return out;
}

// A replica at 100 µs a token, and one of two ranks at 55 µs; the handoff at 4 GB/s.
plan_space small_space() {
  plan_space s;
  s.max_replicas = 4;
  s.chunks = {256, 512};
  s.budgets = {512, 2048};
  profile_file one;
  one.step = {0.2 * ms, 100e-6, 0};
  one.kv_bytes_per_token = 3072;
  one.transfer = transfer_fit{0.25 * ms, 2.5e-10, "tcp"};
  profile_file two = one;
  two.step = {0.15 * ms, 55e-6, 0};
  two.tensor_parallel = 2;
  s.profiles = {one, two};
  s.base.kv_blocks = 2048;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_slo_is_read_with_its_percentiles_and_units_and_refused_naming_the_part) {
  const auto slo = parse_slo("ttft_p99=2s,itl_p99.9=100ms,e2e_p50=1.5m");
  BOOST_TEST_REQUIRE(slo.size() == 3u);
  BOOST_TEST((slo[0].metric == slo_metric::ttft));
  BOOST_TEST(slo[0].percentile == 0.99, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(slo[0].limit_s == 2.0);
  BOOST_TEST((slo[1].metric == slo_metric::itl));
  BOOST_TEST(slo[1].percentile == 0.999, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(slo[1].limit_s == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(slo[2].limit_s == 90.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(format_slo(parse_slo("ttft_p99=2s,itl_p99=100ms")) == "ttft_p99=2s,itl_p99=100ms");
  BOOST_TEST(plan_error("ttft_p99=2").find("ttft_p99=2: the limit") != std::string::npos);
  BOOST_TEST(plan_error("tpot_p99=2s").find("the metric is ttft, itl or e2e") != std::string::npos);
  BOOST_TEST(plan_error("ttft_p0=2s").find("the percentile") != std::string::npos);
  BOOST_TEST(plan_error("").find("no target") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_planner_finds_what_a_brute_force_search_finds_trying_fewer) {
  const auto trace = small_trace();
  const plan_space s = small_space();
  // SLOs whose answers differ in kind (with these profiles: 3 prefill + 1 decode; 3 replicas of
  // two ranks; 1 + 1), so that the search is held to brute force in each mode (and each search
  // tries aggregated shapes on its way).
  bool disaggregated = false, two_ranks = false;
  for (const char* spec : {"ttft_p99=2s,itl_p99=30ms", "ttft_p99=200ms,itl_p99=20ms", "itl_p99=15ms"}) {
    const auto slo = parse_slo(spec);
    const plan_result searched = plan(s, slo, trace), every = brute_force_plan(s, slo, trace);
    BOOST_TEST_REQUIRE(every.found, spec);
    BOOST_TEST_REQUIRE(searched.found, spec);
    BOOST_TEST(searched.best.candidate.describe(s) == every.best.candidate.describe(s), spec);
    BOOST_TEST(searched.best.devices == every.best.devices, spec);
    disaggregated = disaggregated || searched.best.candidate.prefill_replicas > 0;
    two_ranks = two_ranks || searched.best.candidate.profile == 1;
    BOOST_TEST(searched.best.devices > 1, spec << ": one replica already meets it; the case tests nothing");
    BOOST_TEST(searched.tried.size() < every.tried.size(), spec);
    // The frontier: devices rise and goodput with them; the cheapest meeting the SLO is on it.
    for (std::size_t i = 1; i < searched.pareto.size(); ++i) {
      BOOST_TEST(searched.pareto[i].devices > searched.pareto[i - 1].devices);
      BOOST_TEST(searched.pareto[i].goodput > searched.pareto[i - 1].goodput);
    }
  }
  BOOST_TEST(disaggregated);
  BOOST_TEST(two_ranks);
}

BOOST_AUTO_TEST_CASE(the_topology_written_names_the_pools_and_the_scheduler_chosen) {
  const plan_space s = small_space();
  topology_options o;
  o.kv_blocks = 2048;
  o.kv_bytes_per_token = 3072;
  o.comment = "two lines\nof comment";
  const std::string t = plan_topology_toml(s, plan_candidate{2, 5, 256, 2048, 1}, o);
  BOOST_TEST(t.rfind("# two lines\n# of comment\n", 0) == 0, t);
  BOOST_TEST(t.find("name = \"prefill\"\nrole = \"prefill\"\nreplicas = 2\nnodes = [\"prefill-0\", \"prefill-1\"]\ntensor_parallel = 2") != std::string::npos, t);
  BOOST_TEST(t.find("name = \"decode\"\nrole = \"decode\"\nreplicas = 3\n") != std::string::npos, t);
  BOOST_TEST(t.find("max_batched_tokens = 2048\n") != std::string::npos, t);
  BOOST_TEST(t.find("chunk = 256\n") != std::string::npos, t);
  BOOST_TEST(t.find("kv_memory = \"96MiB\"") != std::string::npos, t);  // 2048 blocks x 16 tokens x 3 KiB
}

BOOST_AUTO_TEST_SUITE_END()
