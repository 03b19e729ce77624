// The cluster simulation (runtime/sim/cluster_sim.h) against figures worked out by hand: step
// counts and times from the scheduler's budget and chunk, tokens one step apart, prefix hits
// that shorten a prompt's work, kv_aware routing to the replica holding a prefix, preemption
// when KV runs out, and refusals of what cannot run.
#define BOOST_TEST_MODULE cluster_sim
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/sim/cluster_sim.h"

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
