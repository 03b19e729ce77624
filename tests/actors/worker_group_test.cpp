// Worker and group death inside a replica. A dead rank restarts its group as a whole (fresh
// ranks, empty KV) and the scheduler recomputes what the lost KV held: the requests stay on the
// replica and finish with exactly the undisturbed tokens. A dead group, or one past its restart
// limit, ends its replica, and the request owner moves the requests elsewhere. The node
// directory never names an agent its asker saw die.
#define BOOST_TEST_MODULE worker_group
#include <boost/test/unit_test.hpp>

#include "tests/support/cluster_run.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_dead_rank_restarts_its_group_and_requests_finish_with_the_same_tokens) {
  for (bool greedy : {true, false}) {
    const auto reqs = test::mixed_requests(16, test::small_model()->config().vocab_size, greedy, 120);
    auto topo = test::local_topology(1);
    topo.pools[0].pipeline_parallel = 2;  // two ranks, one per half of the layers
    const auto got = test::run_cluster(topo, reqs, 24, [](local_cluster& c) { c.kill_worker(0, 1); });
    BOOST_TEST_MESSAGE((greedy ? "greedy" : "seeded") << ": from the kill of rank 1 to the next token: "
                       << ms_between(got.fault_at, got.first_token_after_fault) << " ms");
    BOOST_TEST(got.group0.ranks == 2u);
    BOOST_TEST(got.group0.restarts == 1u);
    BOOST_TEST(got.migrations.empty());  // the replica survived: nothing moved
    test::check_same(reqs, test::engine_outputs(reqs), got);
  }
}

BOOST_AUTO_TEST_CASE(a_dead_group_ends_its_replica_and_its_requests_migrate) {
  const auto reqs = test::mixed_requests(16, test::small_model()->config().vocab_size, false, 120);
  const auto got = test::run_cluster(test::local_topology(2), reqs, 24, [](local_cluster& c) { c.kill_group(0); });
  BOOST_TEST_MESSAGE(got.migrations.size() << " requests migrated after the group of replica 0 was killed");
  BOOST_TEST(got.migrations.size() > 0u);
  for (auto& m : got.migrations) BOOST_TEST((m.from == replica_id(0) && m.to == replica_id(1)));
  test::check_same(reqs, test::engine_outputs(reqs), got);
}

BOOST_AUTO_TEST_CASE(a_group_past_its_restart_limit_gives_up_and_its_requests_migrate) {
  const auto reqs = test::mixed_requests(16, test::small_model()->config().vocab_size, true, 120);
  auto topo = test::local_topology(2);
  topo.timeouts.group_restarts = 0;  // the first rank death is one too many
  const auto got = test::run_cluster(topo, reqs, 24, [](local_cluster& c) { c.kill_worker(0, 0); });
  BOOST_TEST(got.migrations.size() > 0u);
  for (auto& m : got.migrations) BOOST_TEST((m.from == replica_id(0) && m.to == replica_id(1)));
  test::check_same(reqs, test::engine_outputs(reqs), got);
}

// A rank that dies between steps takes its KV with it just the same: the prefix cache of the
// replica then names blocks whose tensors are gone. The next step must not read them: the group
// fails it, the scheduler forgets its cached prefixes and recomputes. (The group used to restart
// silently between steps, and a request that reused a cached prefix got tokens computed from
// empty KV.)
BOOST_AUTO_TEST_CASE(a_rank_dying_between_steps_does_not_leave_cached_prefixes_pointing_at_lost_kv) {
  for (int tensor : {1, 2}) {
    BOOST_TEST_CONTEXT("tensor ranks " << tensor) {
      auto reqs = test::mixed_requests(2, test::small_model()->config().vocab_size, true, 120);
      reqs[0].prompt = reqs[1].prompt;  // 40 tokens: two full blocks the prefix cache keeps
      reqs[1].prompt.push_back(7);      // the same prefix, one token more
      const auto expected = test::engine_outputs(reqs);
      auto topo = test::local_topology(1);
      topo.pools[0].pipeline_parallel = 2;
      topo.pools[0].tensor_parallel = tensor;
      test::config cfg;
      caf::actor_system sys{cfg};
      local_cluster cluster(sys, topo, test::small_model(), nullptr);
      caf::scoped_actor self{sys};
      BOOST_TEST(test::run_request(self, cluster.owner(), reqs[0]) == expected[0]);
      // Idle now: the step that finished the request has answered.
      cluster.kill_worker(0, std::size_t(tensor));  // stage 1's first rank
      for (group_status g = cluster.group_of(0); g.generation < 2;) g = cluster.group_of(0);
      BOOST_TEST(test::run_request(self, cluster.owner(), reqs[1]) == expected[1]);
      BOOST_TEST(cluster.group_of(0).restarts == 1u);
    }
  }
}

// A group asks the node directory for a node's agent to start a rank there. When that node has
// just died, its agent can die before answering while the directory has not heard yet: asked
// again past the dead agent, the directory must not name it a second time but wait for the
// node's next agent. (It named the dead one again, and a group whose remote rank died inside a
// collective hung until the step deadline, or gave up.)
BOOST_AUTO_TEST_CASE(a_directory_asked_past_a_dead_agent_waits_for_the_nodes_next_one) {
  test::config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto directory = sys.spawn(node_directory);
  auto idle = [](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; };
  auto dead = sys.spawn(idle), next = sys.spawn(idle);
  self->send(directory, agent_atom::value, std::string("ranks"), dead);
  caf::actor got;
  self->request(directory, std::chrono::seconds(30), agent_atom::value, std::string("ranks"))
      .receive([&](caf::actor a) { got = a; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST((got == dead));
  // Asked past it, then the node's next agent registers (in that order: both from this actor).
  auto past = self->request(directory, std::chrono::seconds(30), agent_atom::value, std::string("ranks"), dead.address());
  self->send(directory, agent_atom::value, std::string("ranks"), next);
  std::move(past).receive([&](caf::actor a) { got = a; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST((got == next));
  self->request(directory, std::chrono::seconds(30), agent_atom::value, std::string("ranks"))
      .receive([&](caf::actor a) { got = a; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST((got == next));
  for (auto& a : {directory, dead, next}) self->send_exit(a, caf::exit_reason::user_shutdown);
}
