// The node agent spawns and stops replicas on request and reports the process's resources;
// the head's registry places a joining node's replicas through it.
#define BOOST_TEST_MODULE node_agent
#include <boost/test/unit_test.hpp>


#include <caf/all.hpp>

#include <chrono>

#include "actors/cluster/local_cluster.h"
#include "actors/cluster/node_agent.h"
#include "actors/serving/scheduler_actor.h"
#include "runtime/model/fingerprint.h"
#include "tests/support/models.h"

using namespace troupe;
using namespace troupe::actors;

namespace {
struct config : caf::actor_system_config {
  config() { register_protocols(*this); }
};
constexpr auto timeout = std::chrono::seconds(30);

// Replicas of the tiny test model with 16 KV blocks each, as a node agent starts them.
replica_factory tiny_replicas() {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  auto model = std::shared_ptr<const model::llama_model>(model::llama_model::load(dir));
  engine::engine_config ec;
  ec.num_blocks = 16;
  replica_factory f;
  f.start = [=](caf::actor_system& s, replica_id, const model_revision*) {
    return s.spawn(scheduler, model, std::shared_ptr<const tokenizer::tokenizer>(), ec, group_config{}, kv_store_actor{});
  };
  return f;
}
}  // namespace

BOOST_AUTO_TEST_CASE(agent_spawns_stops_and_reports) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  config cfg;
  caf::actor_system sys{cfg};
  auto agent = sys.spawn(node_agent, std::string("n1"), tiny_replicas(), dir);
  caf::scoped_actor self{sys};
  scheduler_actor s;
  self->request(agent, timeout, spawn_replica_atom::value, replica_id(7))
      .receive([&](scheduler_actor x) { s = x; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST_REQUIRE(bool(s));
  self->request(s, timeout, load_atom::value)
      .receive([&](const load_report& r) { BOOST_TEST(r.total_blocks == 16); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->request(agent, timeout, resources_atom::value)
      .receive(
          [&](const node_resources& r) {
            BOOST_TEST(r.node == "n1");
            BOOST_TEST(r.cores > 0);
            BOOST_TEST(r.memory_total > 0u);
            BOOST_TEST(r.replicas == std::vector<replica_id>{replica_id(7)});
            BOOST_TEST(r.model == dir);
          },
          [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->monitor(s);
  self->request(agent, timeout, stop_replica_atom::value, replica_id(7))
      .receive([](bool stopped) { BOOST_TEST(stopped); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  bool down = false;
  self->receive([&](const caf::down_msg&) { down = true; });  // the replica really stopped
  BOOST_TEST(down);
  self->request(agent, timeout, stop_replica_atom::value, replica_id(7))
      .receive([](bool stopped) { BOOST_TEST(!stopped); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->send_exit(agent, caf::exit_reason::user_shutdown);
}

// A replica that dies (the admin console's `kill`: an error exit) stayed dead for good and its
// pool below min_replicas. The agent now restarts it after a backoff, as an OTP supervisor would;
// a replica stopped on request stays stopped.
BOOST_AUTO_TEST_CASE(a_replica_that_dies_is_restarted_and_one_stopped_is_not) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  config cfg;
  caf::actor_system sys{cfg};
  auto agent = sys.spawn(node_agent, std::string("n1"), tiny_replicas(), dir);
  caf::scoped_actor self{sys};
  scheduler_actor first;
  self->request(agent, timeout, spawn_replica_atom::value, replica_id(3))
      .receive([&](scheduler_actor x) { first = x; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST_REQUIRE(bool(first));
  // The agent tells its heads of a replica it restarted on its own; the test is its head here, so
  // it hears of the restart itself. (Asking the agent's resources raced the agent's own down
  // message: it still listed the dying replica, and answered it.)
  self->send(agent, heads_atom::value, std::vector<caf::actor>{caf::actor_cast<caf::actor>(self)});
  self->send_exit(first, caf::make_error(caf::sec::runtime_error, "killed by the test"));
  scheduler_actor again;
  self->receive([&](replica_atom, replica_id r, scheduler_actor s) {
                  BOOST_TEST(r == replica_id(3));
                  again = std::move(s);
                },
                caf::after(std::chrono::seconds(60)) >> [] { BOOST_FAIL("the dead replica was not restarted"); });
  BOOST_TEST((again && again.address() != first.address()));
  self->request(agent, timeout, resources_atom::value)
      .receive([&](const node_resources& r) { BOOST_TEST(r.replicas == std::vector<replica_id>{replica_id(3)}); },
               [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->request(agent, timeout, spawn_replica_atom::value, replica_id(3))  // answers the live one
      .receive([&](scheduler_actor x) { BOOST_TEST((x.address() == again.address())); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->request(again, timeout, load_atom::value)
      .receive([&](const load_report& r) { BOOST_TEST(r.total_blocks == 16); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  // Stopped on request: gone, and not brought back.
  self->monitor(again);
  self->request(agent, timeout, stop_replica_atom::value, replica_id(3))
      .receive([](bool stopped) { BOOST_TEST(stopped); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->receive([&](const caf::down_msg&) {});
  self->request(agent, timeout, resources_atom::value)
      .receive([&](const node_resources& r) { BOOST_TEST(r.replicas.empty()); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->send_exit(agent, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(registry_places_a_joining_nodes_replicas_and_refuses_strangers) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  auto model = std::shared_ptr<const model::llama_model>(model::llama_model::load(dir));
  auto topo = topology::load_topology(std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml");
  topo.model.path = dir;
  config cfg;
  caf::actor_system sys{cfg};
  local_cluster head(sys, topo, nullptr, nullptr, placement_mode::head_node_only);
  BOOST_TEST(head.live_replicas() == 0u);
  const auto t0 = std::chrono::system_clock::now();
  auto registry = sys.spawn(node_registry, topo, head.router(), std::map<std::string, node_agent_actor>{}, caf::actor{});
  auto agent = sys.spawn(node_agent, std::string("node-a"), replica_factory_of(topo, model, nullptr, kv_store_actor{}), dir);
  caf::scoped_actor self{sys};
  const std::string token = "a-cluster-token-of-some-length", fp = model::model_fingerprint(dir);
  // Refused, each with its reason, and nothing placed: before admission, a wrong token, another
  // model, the head's own name (a rogue "head" took every request before), a stranger.
  auto refused = [&](const join_request& j, const std::string& why) {
    self->request(registry, timeout, join_atom::value, j)
        .receive([&](const join_reply&) { BOOST_FAIL(j.node << " joined; expected: " << why); },
                 [&](caf::error& e) { BOOST_TEST(sys.render(e).find(why) != std::string::npos, sys.render(e)); });
  };
  refused({"node-a", agent, token, fp}, "not admitting nodes yet");
  self->send(registry, admit_atom::value, join_credentials{token, fp});
  refused({"node-a", agent, "wrong-token-wrong-token", fp}, "wrong cluster token");
  const std::string other = test::synth_model("tiny-llama-f32-seed7", [] {
    auto o = test::preset("tiny");
    o.seed = 7;
    return o;
  }());
  refused({"node-a", agent, token, model::model_fingerprint(other)}, "serves another model");
  refused({"head", agent, token, fp}, "is a head, not a node that joins one");
  refused({"node-z", agent, token, fp}, "no node named");
  BOOST_TEST(head.live_replicas() == 0u);
  join_reply first;
  self->request(registry, timeout, join_atom::value, join_request{"node-a", agent, token, fp})
      .receive([&](const join_reply& r) { first = r; }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  BOOST_TEST(first.placed == 1u);
  BOOST_TEST(head.live_replicas() == 1u);
  refused({"node-a", agent, token, fp}, "has already joined and is alive");  // a second node-a does not replace the first
  BOOST_TEST(head.live_replicas() == 1u);
  // The head's generation is its start: a later start of a head answers with a larger one, so
  // a node can tell a restarted head from an older process of it.
  BOOST_TEST(first.generation >= std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()));
  auto later = sys.spawn(node_registry, topo, head.router(), std::map<std::string, node_agent_actor>{}, caf::actor{});
  self->send(later, admit_atom::value, join_credentials{token, fp});
  auto agent_b = sys.spawn(node_agent, std::string("node-b"), replica_factory_of(topo, model, nullptr, kv_store_actor{}), dir);
  self->request(later, timeout, join_atom::value, join_request{"node-b", agent_b, token, fp})
      .receive([&](const join_reply& r) { BOOST_TEST(r.generation > first.generation); }, [&](caf::error& e) { BOOST_FAIL(sys.render(e)); });
  self->send_exit(agent_b, caf::exit_reason::user_shutdown);
  self->send_exit(later, caf::exit_reason::user_shutdown);
  self->send_exit(agent, caf::exit_reason::user_shutdown);
  self->send_exit(registry, caf::exit_reason::user_shutdown);
}
