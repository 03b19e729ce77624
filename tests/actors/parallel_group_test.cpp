// Parallel groups inside a replica (actors/serving/worker_group.h): tensor-parallel ranks on threads of
// the replica's process joined by shared-memory collectives, pipeline stages with the step cut
// into micro-batches, and both at once, each give the single-rank replica's tokens on greedy
// requests. A tensor rank that dies inside a collective, while its peer waits in it, does not
// hang the group: the group restarts as a whole and the requests finish with the undisturbed
// tokens, on the same replica.
#define BOOST_TEST_MODULE parallel_group
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "tests/support/cluster_run.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

topology::topology_config grid(int pipeline, int tensor, int micro) {
  auto topo = test::local_topology(1);
  topo.pools[0].pipeline_parallel = pipeline;
  topo.pools[0].tensor_parallel = tensor;
  topo.pools[0].micro_batches = micro;
  return topo;
}

// configs/disagg.toml (a prefill and a decode pool) on the small test model.
topology::topology_config disagg_topology() {
  auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml");
  topo.model.path = test::synth_model("small-llama-f32", test::preset("small"));
  return topo;
}

// Starting a cluster of `topo` fails with an error that names `why`.
void check_refused(const topology::topology_config& topo, const std::string& why) {
  test::config cfg;
  caf::actor_system sys{cfg};
  try {
    local_cluster c(sys, topo, test::small_model(), nullptr);
    BOOST_FAIL("the topology was accepted; expected: " << why);
  } catch (const troupe::input_error& e) {
    BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
  }
}

std::vector<engine::request> greedy_requests() {
  return test::mixed_requests(12, test::small_model()->config().vocab_size, true, 120);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tensor_pipeline_and_micro_batched_groups_give_the_single_rank_tokens) {
  const auto reqs = greedy_requests();
  const auto expected = test::engine_outputs(reqs);
  struct shape {
    int pipeline, tensor, micro;
  };
  for (shape s : {shape{1, 2, 1}, shape{2, 1, 2}, shape{2, 1, 1}, shape{2, 2, 2}, shape{1, 4, 1}}) {
    BOOST_TEST_CONTEXT("pipeline " << s.pipeline << " tensor " << s.tensor << " micro-batches " << s.micro) {
      const auto got = test::run_cluster(grid(s.pipeline, s.tensor, s.micro), reqs);
      BOOST_TEST(got.group0.pipeline == std::uint32_t(s.pipeline));
      BOOST_TEST(got.group0.tensor == std::uint32_t(s.tensor));
      BOOST_TEST(got.group0.ranks == std::uint32_t(s.pipeline * s.tensor));
      BOOST_TEST(got.group0.restarts == 0u);
      test::check_same(reqs, expected, got);
    }
  }
}

// A model with windowed layers (Gemma 3's five to one) keeps only its windows' KV pages: its
// plans carry each window group's tables to every rank, and each stage's cache holds the pages of
// its own layers' groups.
BOOST_AUTO_TEST_CASE(window_pages_cross_tensor_and_pipeline_ranks_unchanged) {
  auto opts = test::preset("tiny", "gemma3");
  opts.layers = 6;
  auto topo = grid(2, 2, 2);
  topo.model.path = test::synth_model("tiny-gemma3-6-layers-f32", opts);
  const auto m = std::shared_ptr<const model::llama_model>(model::llama_model::load(topo.model.path));
  auto reqs = test::mixed_requests(12, m->config().vocab_size, true, 120);
  for (auto& r : reqs) r.params.max_tokens = 40;  // past the 32-position windows
  auto cfg = test::engine_cfg(512, 2048);
  cfg.free_windows = false;  // every position kept: what the split must compute
  auto e = engine::cpu_engine(m, nullptr, cfg);
  const auto expected = engine::generate_all(e, reqs);
  const auto got = test::run_cluster(topo, reqs, -1, {}, m);
  BOOST_TEST(got.group0.ranks == 4u);
  test::check_same(reqs, expected, got);
}

BOOST_AUTO_TEST_CASE(a_tensor_rank_dying_inside_a_collective_restarts_the_group_and_tokens_are_unchanged) {
  const auto reqs = greedy_requests();
  const auto expected = test::engine_outputs(reqs);
  for (std::size_t victim : {std::size_t(1), std::size_t(2)}) {  // stage 0's second rank; stage 1's first
    BOOST_TEST_CONTEXT("rank " << victim << " of a 2x2 group") {
      // A peer left waiting in the collective would hold the group until the collective's
      // deadline (the step timeout, 300 s here): the restart must come from the death itself.
      auto topo = grid(2, 2, 2);
      topo.timeouts.step = std::chrono::seconds(300);
      const auto t0 = std::chrono::steady_clock::now();
      // The third collective from now: inside a step, with the other rank of the stage in it.
      const auto got = test::run_cluster(topo, reqs, 30, [victim](local_cluster& c) { c.kill_worker_in_collective(0, victim, 3); });
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      BOOST_TEST(took < 150.0, "the run took " << took << " s: a rank waited in the collective");
      BOOST_TEST(got.group0.restarts == 1u);
      BOOST_TEST(got.group0.generation == 2u);
      BOOST_TEST(got.migrations.empty());  // the replica survived
      test::check_same(reqs, expected, got);
    }
  }
}

// Expert parallel on a mixture-of-experts model: the single-rank tokens, undisturbed and with a
// rank dying inside the dispatch's collectives (its peer waits in the all-to-all or all-gather).
BOOST_AUTO_TEST_CASE(an_expert_parallel_group_gives_the_single_rank_tokens_and_survives_a_rank_death) {
  const auto moe = std::shared_ptr<const model::llama_model>(
      model::llama_model::load(test::synth_model("moe-mixtral-f32", test::preset("moe", "mixtral"))));
  const auto reqs = test::mixed_requests(12, moe->config().vocab_size, true, 120);
  const auto expected = test::engine_outputs(reqs, moe);
  auto topo = grid(1, 1, 1);
  topo.model.path = moe->dir();
  topo.pools[0].expert_parallel = 2;
  topo.timeouts.step = std::chrono::seconds(300);
  auto got = test::run_cluster(topo, reqs, -1, {}, moe);
  BOOST_TEST(got.group0.tensor == 2u);
  test::check_same(reqs, expected, got);
  // Routing statistics: the tokens each expert got, over all layers, as the replica reports them
  // (/metrics' moe_expert_tokens), are those of a single-rank replica running the same requests.
  auto single = topo;
  single.pools[0].expert_parallel = 1;
  const auto one = test::run_cluster(single, reqs, -1, {}, moe);
  BOOST_REQUIRE_EQUAL(got.loads.size(), 1u);
  BOOST_REQUIRE_EQUAL(one.loads.size(), 1u);
  BOOST_TEST(got.loads[0].expert_tokens.size() == std::size_t(moe->config().moe->num_experts));
  BOOST_TEST(got.loads[0].expert_tokens == one.loads[0].expert_tokens);
  std::uint64_t routed = 0;
  for (auto n : got.loads[0].expert_tokens) routed += n;
  // Every forwarded token goes to 2 experts in each of the 4 layers.
  BOOST_TEST(routed == (got.loads[0].prompt_tokens_computed + got.loads[0].generated_tokens - reqs.size()) * 2 * 4);
  const auto t0 = std::chrono::steady_clock::now();
  // The 5th collective from now: inside a mixture-of-experts layer's dispatch.
  got = test::run_cluster(topo, reqs, 30, [](local_cluster& c) { c.kill_worker_in_collective(0, 1, 5); }, moe);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 150.0, "the run took " << took << " s: a rank waited in the collective");
  BOOST_TEST(got.group0.restarts == 1u);
  BOOST_TEST(got.migrations.empty());
  test::check_same(reqs, expected, got);
}

// Disaggregation between tensor-parallel replicas: the prefill replica's KV goes to the decode
// replica rank by rank (rank t's heads to rank t), also when the two split their layers into
// different stages; nothing is recomputed on the decode side and the tokens are the engine's.
BOOST_AUTO_TEST_CASE(kv_moves_between_tensor_parallel_replicas_rank_by_rank) {
  auto topo = disagg_topology();
  for (auto& p : topo.pools) p.tensor_parallel = 2;
  topo.pools[1].pipeline_parallel = 2;
  const auto reqs = greedy_requests();
  const auto got = test::run_cluster(topo, reqs);
  test::check_same(reqs, test::engine_outputs(reqs), got);
  BOOST_TEST_REQUIRE(got.loads.size() == 2u);
  BOOST_TEST(got.loads[1].prompt_tokens_computed == 0u);  // every prompt's KV pulled, none recomputed
  BOOST_TEST(got.loads[1].kv_pulls == reqs.size());
  BOOST_TEST(got.loads[1].kv_pull_failures == 0u);
}

BOOST_AUTO_TEST_CASE(pools_that_split_kv_heads_differently_are_refused) {
  auto topo = disagg_topology();
  topo.pools[1].tensor_parallel = 2;
  check_refused(topo, "splits KV heads over 2 ranks and pool");
}

BOOST_AUTO_TEST_CASE(a_tensor_split_the_model_does_not_allow_is_refused_naming_the_pool) {
  // The small model has 4 KV heads.
  check_refused(grid(1, 3, 1), "pools.tensor_parallel: pool \"main\": tensor_parallel = 3 does not divide num_key_value_heads = 4");
}
