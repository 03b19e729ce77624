// Worker groups whose ranks span processes (pools' rank_nodes, configs/tp2-two-nodes.toml): this
// test is the head, holding the replica, its group supervisor and rank 0; a `troupe node`
// process holds the other rank(s), started by its node agent at the supervisor's request and
// joined to rank 0 by Gloo collectives over loopback through the supervisor's rendezvous.
// - A tensor-parallel group across two processes gives the single-rank engine's tokens.
// - The remote rank's whole process dies (SIGKILL) inside a collective while rank 0 waits in
//   it: nothing hangs, the group restarts once its node is back (a new process, as a service
//   manager would start it), and every request ends with the undisturbed tokens, on the same
//   replica, with no migration.
// - A pipeline stage on the other process: hidden states cross processes as actor messages.
#define BOOST_TEST_MODULE group_process
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/cluster/local_cluster.h"
#include "runtime/model/fingerprint.h"
#include "tests/support/cluster_run.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

struct outcome {
  std::map<std::string, std::vector<std::int32_t>> tokens;
  group_status group;
  std::size_t migrations = 0;
  int node_status = 0;  // the first node process's wait status, when it was crashed
  double seconds = 0;
  std::uint64_t prompt_computed = 0;  // prompt tokens computed, over every replica
};

// Runs greedy requests on `topo` (replicas on the head; replica `grouped`'s rank_nodes name node
// "ranks"), with the node process started here; `crash_rank` >= 0 crashes that rank's process
// inside its third collective from now once 30 tokens have arrived, then starts the node again.
outcome run_across_processes(topology::topology_config topo, const std::vector<engine::request>& reqs, int crash_rank,
                             std::size_t grouped = 0) {
  const std::string model_dir = test::synth_model("small-llama-f32", test::preset("small"));
  topo.model.path = model_dir;
  test::network_config cfg(topo);
  caf::actor_system sys{cfg};
  outcome out;
  local_cluster head(sys, topo, test::small_model(), nullptr, placement_mode::head_node_only);
  const std::uint16_t port = head.publish("127.0.0.1", 0);
  const std::string token = "group-process-test-" + std::to_string(::getpid());
  ::setenv("TROUPE_CLUSTER_TOKEN", token.c_str(), 1);
  head.admit({token, model::model_fingerprint(model_dir)});
  const std::vector<std::string> node_cmd = {std::string(TROUPE_BINARY_DIR) + "/troupe", "node", topo.source, "--name", "ranks",
                                             "--head", "127.0.0.1:" + std::to_string(port), "--model", model_dir};
  auto node = std::make_unique<test::child_process>(node_cmd);
  BOOST_TEST_REQUIRE(node->started());
  BOOST_TEST_REQUIRE(node->wait_for_line("ready"));
  const group_status before = head.group_of(grouped);  // answers once every rank is up
  BOOST_TEST(before.restarts == 0u);

  const auto t0 = std::chrono::steady_clock::now();
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<token_sink>(self);
  for (auto& r : reqs)
    self->request(head.owner(), std::chrono::seconds(30), submit_atom::value, r, sink)
        .receive([](bool ok) { BOOST_TEST(ok); }, [&](caf::error& e) { BOOST_FAIL("submit: " << sys.render(e)); });
  std::size_t done = 0;
  int received = 0;
  bool crashed = false;
  while (done < reqs.size()) {
    self->receive(
        [&](token_batch& b) {
          for (auto& u : b.updates) {
            received += int(u.tokens.size());
            auto& t = out.tokens[u.id];
            t.insert(t.end(), u.tokens.begin(), u.tokens.end());
            done += u.finished;
          }
          if (crash_rank >= 0 && !crashed && received >= 30) {
            crashed = true;
            head.crash_rank_process_in_collective(grouped, std::size_t(crash_rank), 3);
            out.node_status = node->reap();  // it dies inside a collective of the next step
            node = std::make_unique<test::child_process>(node_cmd);
            BOOST_TEST_REQUIRE(node->started());
            BOOST_TEST_REQUIRE(node->wait_for_line("ready"));
          }
        },
        caf::after(std::chrono::seconds(120)) >> [&] { BOOST_FAIL("no tokens for 120 s"); });
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(crashed == (crash_rank >= 0));
  self->request(head.owner(), std::chrono::seconds(30), migrations_atom::value)
      .receive([&](std::vector<migration_event>& m) { out.migrations = m.size(); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  out.group = head.group_of(grouped);
  for (const auto& l : test::live_loads(self, head.router())) out.prompt_computed += l.prompt_tokens_computed;
  return out;
}

topology::topology_config two_node_topology() {
  return topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/tp2-two-nodes.toml");
}

std::vector<engine::request> greedy_requests() {
  return test::mixed_requests(8, test::small_model()->config().vocab_size, true, 80);
}

void check_tokens(const std::vector<engine::request>& reqs, const outcome& got) {
  const auto expected = test::engine_outputs(reqs);
  for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got.tokens.at(reqs[i].id) == expected[i], "request " << i);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_tensor_rank_process_killed_inside_a_collective_restarts_the_group_with_the_same_tokens) {
  auto topo = two_node_topology();
  // A rank left waiting in the collective would hold the group until the collective's deadline
  // (the step timeout, 300 s here): the restart must come from the death itself.
  topo.timeouts.step = std::chrono::seconds(300);
  const auto reqs = greedy_requests();
  const auto got = run_across_processes(topo, reqs, 1);
  BOOST_TEST(WIFSIGNALED(got.node_status));
  BOOST_TEST((WIFSIGNALED(got.node_status) ? WTERMSIG(got.node_status) : 0) == SIGKILL);
  BOOST_TEST(got.group.restarts >= 1u);  // the crash, and possibly a start that raced the node's return
  BOOST_TEST(got.group.ranks == 2u);
  BOOST_TEST(got.group.tensor == 2u);
  BOOST_TEST(got.migrations == 0u);  // restarted in place, not moved
  BOOST_TEST(got.seconds < 150.0, "the run took " << got.seconds << " s: a rank waited out a collective");
  check_tokens(reqs, got);
}

BOOST_AUTO_TEST_CASE(a_pipeline_stage_in_another_process_gives_the_single_rank_tokens) {
  auto topo = two_node_topology();
  auto& pool = topo.pools.at(0);
  pool.tensor_parallel = 1;
  pool.pipeline_parallel = 2;
  pool.micro_batches = 2;
  pool.rank_nodes = {"head", "ranks"};  // stage 0 here, stage 1 in the node
  const auto reqs = greedy_requests();
  const auto got = run_across_processes(topo, reqs, -1);
  BOOST_TEST(got.group.restarts == 0u);
  BOOST_TEST(got.group.pipeline == 2u);
  check_tokens(reqs, got);
}

// Disaggregated: a one-rank prefill replica hands every request to a decode replica whose second
// pipeline stage is in the other process; the KV of that stage's layers is pulled by the remote
// rank itself. No prompt is computed twice, and the tokens are the engine's.
BOOST_AUTO_TEST_CASE(kv_handed_to_a_group_with_a_stage_in_another_process_is_pulled_by_that_stage) {
  auto topo = two_node_topology();
  auto decode = topo.pools.at(0);
  decode.name = "decode";
  decode.role = topology::pool_role::decode;
  decode.tensor_parallel = 1;
  decode.pipeline_parallel = 2;
  decode.micro_batches = 1;
  decode.rank_nodes = {"head", "ranks"};
  auto prefill = topo.pools.at(0);
  prefill.name = "prefill";
  prefill.role = topology::pool_role::prefill;
  prefill.tensor_parallel = 1;
  prefill.rank_nodes.clear();
  topo.pools = {prefill, decode};
  const auto reqs = greedy_requests();
  const auto got = run_across_processes(topo, reqs, -1, 1);
  BOOST_TEST(got.group.restarts == 0u);
  BOOST_TEST(got.migrations == 0u);
  std::uint64_t prompts = 0;
  for (const auto& r : reqs) prompts += r.prompt.size();
  BOOST_TEST(got.prompt_computed == prompts);  // once each, on the prefill replica
  check_tokens(reqs, got);
}
