// A topology started in one process through the embedding API: requests go client -> request
// owner -> router -> scheduler and tokens come back batched. With a replica killed mid-run,
// every request still ends with exactly the tokens of an undisturbed run.
#define BOOST_TEST_MODULE local_cluster
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <chrono>

#include "actors/cluster/local_cluster.h"
#include "tests/support/cluster_run.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

using test::small_model;

using test::config;
using test::local_topology;
using test::run_result;
using test::check_same;
using test::engine_outputs;

run_result run(const topology::topology_config& topo, const std::vector<engine::request>& reqs, int kill_after = -1) {
  test::fault_action kill_replica0 = [](local_cluster& c) { c.kill_replica(0); };
  return test::run_cluster(topo, reqs, kill_after, kill_after >= 0 ? kill_replica0 : test::fault_action{});
}

}  // namespace

BOOST_AUTO_TEST_CASE(local_toml_in_one_process_gives_the_engines_tokens_for_64_concurrent_requests) {
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(64, small_model()->config().vocab_size, greedy, 120);
    check_same(reqs, engine_outputs(reqs), run(local_topology(1), reqs));
  }
}

BOOST_AUTO_TEST_CASE(requests_on_a_killed_replica_migrate_and_finish_with_the_same_tokens) {
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(32, small_model()->config().vocab_size, greedy, 120);
    const auto expected = engine_outputs(reqs);
    const run_result got = run(local_topology(2), reqs, 40);
    double worst = 0;
    for (auto& m : got.migrations) {
      worst = std::max(worst, m.seconds_to_first_token);
      BOOST_TEST(m.from == replica_id(0));
      BOOST_TEST(m.to == replica_id(1));
    }
    BOOST_TEST_MESSAGE((greedy ? "greedy" : "seeded") << ": " << got.migrations.size()
                       << " requests migrated; from the death being noticed to a migrated request's first token: at most "
                       << worst * 1e3 << " ms");
    // Some requests unfinished for the client at the kill may have finished on the replica
    // just before it died (their last tokens were in flight); the rest must have moved.
    BOOST_TEST(got.migrations.size() > 0u);
    BOOST_TEST(int(got.migrations.size()) <= got.unfinished_on_dead);
    check_same(reqs, expected, got);
  }
}

BOOST_AUTO_TEST_CASE(a_drained_replicas_requests_finish_elsewhere_with_their_kv_and_no_prompt_recomputed) {
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(32, small_model()->config().vocab_size, greedy, 120);
    const auto expected = engine_outputs(reqs);
    test::fault_action drain0 = [](local_cluster& c) { c.drain_replica(0); };
    const run_result got = test::run_cluster(local_topology(2), reqs, 40, drain0);
    check_same(reqs, expected, got);
    BOOST_TEST_REQUIRE(got.loads.size() == 2u);
    std::uint64_t prompts = 0, computed = 0;
    for (const auto& r : reqs) prompts += r.prompt.size();
    for (const auto& l : got.loads) computed += l.prompt_tokens_computed;
    BOOST_TEST(computed == prompts);  // every prompt computed once: moved requests took their KV along
    BOOST_TEST(got.loads[0].drained());
    BOOST_TEST(got.loads[0].used_blocks == 0);
    BOOST_TEST(got.loads[1].kv_pulls > 0u);
    BOOST_TEST(got.loads[1].kv_pull_failures == 0u);
    BOOST_TEST(got.migrations.empty());  // a drain is not a death
    BOOST_TEST_MESSAGE((greedy ? "greedy" : "seeded") << ": " << got.loads[1].kv_pulls << " requests moved with their KV ("
                       << got.loads[1].kv_pull_bytes << " bytes)");
  }
}

BOOST_AUTO_TEST_CASE(a_request_that_cannot_be_placed_ends_with_an_error) {
  config cfg;
  caf::actor_system sys{cfg};
  local_cluster cluster(sys, local_topology(1), small_model(), nullptr);
  caf::scoped_actor self{sys};
  cluster.kill_replica(0);
  // The router learns of the death through its monitor; keep asking until it has.
  auto r = test::mixed_requests(1, small_model()->config().vocab_size, true)[0];
  std::string err;
  for (int attempt = 0; attempt < 100 && err.find("no replica") == std::string::npos; ++attempt) {
    r.id = "r" + std::to_string(attempt);
    self->request(cluster.owner(), std::chrono::seconds(30), submit_atom::value, r,
                  caf::actor_cast<token_sink>(self))
        .receive([&](bool) {}, [&](caf::error& e) { err = sys.render(e); });
  }
  BOOST_TEST(err.find("no replica can take it") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(a_sim_topology_serves_many_requests_deterministically) {
  auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/sim-32.toml");
  auto run_sim = [&] {
    config cfg;
    caf::actor_system sys{cfg};
    local_cluster cluster(sys, topo, nullptr, nullptr);
    BOOST_TEST(cluster.schedulers().size() == 32u);
    caf::scoped_actor self{sys};
    std::map<std::string, std::vector<std::int32_t>> tokens;
    for (int i = 0; i < 300; ++i) {
      engine::request r;
      r.id = "s" + std::to_string(i);
      r.prompt.assign(std::size_t(10 + i % 50), 5);
      r.params.max_tokens = 4 + i % 7;
      r.params.seed = std::uint64_t(i);
      self->request(cluster.owner(), std::chrono::seconds(30), submit_atom::value, r, caf::actor_cast<token_sink>(self))
          .receive([](bool ok) { BOOST_TEST(ok); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
    }
    std::size_t done = 0;
    while (done < 300)
      self->receive(
          [&](token_batch& b) {
            for (auto& u : b.updates) {
              auto& t = tokens[u.id];
              t.insert(t.end(), u.tokens.begin(), u.tokens.end());
              done += u.finished ? 1 : 0;
            }
          },
          caf::after(std::chrono::seconds(60)) >> [&] { BOOST_FAIL("no tokens for 60 s"); });
    return tokens;
  };
  const auto first = run_sim();
  for (int i = 0; i < 300; ++i) BOOST_TEST(first.at("s" + std::to_string(i)).size() == std::size_t(4 + i % 7));
  BOOST_TEST((run_sim() == first));  // same tokens whatever replica each request landed on
}

BOOST_AUTO_TEST_CASE(disaggregated_prefill_hands_the_kv_to_the_decode_replica) {
  // configs/disagg.toml: one prefill replica, one decode replica. Every request is prefilled
  // on the first, which samples its first token, and continues on the second from the KV it
  // was handed: the decode replica computes no prompt token, and the tokens are the engine's.
  for (bool greedy : {true, false}) {
    auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml");
    topo.model.path = test::synth_model("small-llama-f32", test::preset("small"));
    topo.pools[1].pipeline_parallel = 2;  // the two sides split the layers differently
    const auto reqs = test::mixed_requests(24, small_model()->config().vocab_size, greedy, 120);
    const run_result got = test::run_cluster(topo, reqs);
    check_same(reqs, engine_outputs(reqs), got);
    BOOST_TEST_REQUIRE(got.loads.size() == 2u);
    BOOST_TEST(got.loads[0].generated_tokens == reqs.size());  // one token each on the prefill side
    BOOST_TEST(got.loads[1].prompt_tokens_computed == 0u);     // no prompt recomputed on the decode side
    BOOST_TEST(got.loads[0].used_blocks == 0);                 // every held block released
    BOOST_TEST(got.loads[1].used_blocks == 0);
    BOOST_TEST(got.migrations.empty());
  }
}

BOOST_AUTO_TEST_CASE(a_drained_decode_replica_passes_on_the_handoffs_still_waiting_to_pull) {
  // One prefill replica, two decode replicas taking two requests at a time: handoffs queue on
  // both. Draining the first moves its running requests with their KV and passes the queued ones
  // on with the handle they came with (the prefill replica still holds their blocks): nothing is
  // recomputed anywhere, and every hold ends released.
  auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml");
  topo.model.path = test::synth_model("small-llama-f32", test::preset("small"));
  topo.pools[1].replicas = 2;
  topo.scheduler.limits.max_num_seqs = 2;
  const auto reqs = test::mixed_requests(16, small_model()->config().vocab_size, true, 120);
  test::fault_action drain_decode = [](local_cluster& c) { c.drain_replica(1); };
  const run_result got = test::run_cluster(topo, reqs, 24, drain_decode);
  check_same(reqs, engine_outputs(reqs), got);
  BOOST_TEST_REQUIRE(got.loads.size() == 3u);
  std::uint64_t prompts = 0, computed = 0, failures = 0;
  for (const auto& r : reqs) prompts += r.prompt.size();
  for (const auto& l : got.loads) {
    computed += l.prompt_tokens_computed;
    failures += l.kv_pull_failures;
    BOOST_TEST(l.used_blocks == 0);  // every hold released, every pull's blocks freed
    BOOST_TEST(l.handoffs_held == 0);
  }
  BOOST_TEST(computed == prompts);  // each prompt computed once, on the prefill replica
  BOOST_TEST(failures == 0u);
  BOOST_TEST(got.loads[1].drained());
  BOOST_TEST(got.loads[2].kv_pulls > 0u);
  BOOST_TEST(got.migrations.empty());
}

BOOST_AUTO_TEST_CASE(short_prompts_skip_the_prefill_pool_when_asked) {
  // Conditional disaggregation: with disaggregate_min_prompt = 64, prompts under 64 tokens run
  // whole on the decode replica; longer ones are prefilled on the prefill replica.
  auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml");
  topo.model.path = test::synth_model("small-llama-f32", test::preset("small"));
  topo.router.disaggregate_min_prompt = 64;
  const auto reqs = test::mixed_requests(16, small_model()->config().vocab_size, true, 120);
  std::uint64_t long_prompts = 0;
  for (auto& r : reqs) long_prompts += r.prompt.size() >= 64;
  BOOST_TEST_REQUIRE(long_prompts > 0u);
  BOOST_TEST_REQUIRE(long_prompts < reqs.size());
  const run_result got = test::run_cluster(topo, reqs);
  check_same(reqs, engine_outputs(reqs), got);
  BOOST_TEST_REQUIRE(got.loads.size() == 2u);
  BOOST_TEST(got.loads[0].generated_tokens == long_prompts);  // one first token per long prompt
}

// A replica running a request for this head's request owner that its book places nowhere (a
// placement it gave up on after a stall, whose answer came late) ran it for nobody to the end.
// The owner holds its book against each replica's every sweep and aborts such a request there.
BOOST_AUTO_TEST_CASE(a_request_a_replica_runs_for_nobody_is_aborted_there) {
  config cfg;
  caf::actor_system sys{cfg};
  local_cluster cluster(sys, local_topology(1), small_model(), nullptr);
  caf::scoped_actor self{sys};
  auto r = test::mixed_requests(1, small_model()->config().vocab_size, true)[0];
  r.id = "stale";
  r.params.max_tokens = 3000;
  r.params.ignore_eos = true;
  const auto replica = cluster.schedulers().at(0);
  self->request(replica, std::chrono::seconds(30), submit_atom::value, r, caf::actor_cast<token_sink>(cluster.owner()))
      .receive([](bool ok) { BOOST_TEST(ok); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  load_report l;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  do {
    self->request(replica, std::chrono::seconds(30), load_atom::value).receive([&](load_report& x) { l = x; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  } while ((l.running_seqs > 0 || l.waiting_seqs > 0) && std::chrono::steady_clock::now() < deadline);
  BOOST_TEST(l.running_seqs == 0);
  BOOST_TEST(l.generated_tokens < 3000u, "it ran to the end: " << l.generated_tokens << " tokens");
}

// A moving request that found no live replica ended at once in "no replica can take it", its
// client's stream cut: its only replica died, or (a swap's drain, a node's link cut) the others
// were not serving just then. It now waits for a replica (here the one its node agent restarts)
// up to the request timeout, and ends with exactly the undisturbed run's tokens.
BOOST_AUTO_TEST_CASE(requests_whose_only_replica_died_wait_for_its_restart) {
  const auto reqs = test::mixed_requests(8, small_model()->config().vocab_size, true, 120);
  const run_result got = run(local_topology(1), reqs, 40);
  BOOST_TEST(got.migrations.size() > 0u);
  check_same(reqs, engine_outputs(reqs), got);
}
