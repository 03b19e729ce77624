// Scaling over the admin protocol against `troupe serve`: `scale` up takes a warm replica that
// then serves; `scale` down under load drains the newest replica with its requests' KV and
// loses nothing; bounds are enforced. And the autoscaler: a queue that builds makes it add the
// warm replica, which serves; once quiet, it goes back to min_replicas.
#define BOOST_TEST_MODULE scale
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <future>

#include "actors/control/admin_client.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

struct cluster {
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(test::free_port());
  std::string events = "tcp://127.0.0.1:" + std::to_string(test::free_port());
  std::unique_ptr<test::serve_process> serve;
  std::unique_ptr<actors::admin_client> admin;
  explicit cluster(const std::string& name, const std::string& extra) {
    const std::string path = std::string(TROUPE_BINARY_DIR) + "/" + name + ".toml";
    std::ofstream t(path);
    t << "[model]\npath = \"" << test::synth_model("small-llama-f32", test::preset("small")) << "\"\n"
      << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
      << "[[pools]]\nname = \"main\"\nreplicas = 1\nmin_replicas = 1\nmax_replicas = 2\n"
      << "[router]\npolicy = \"least_loaded\"\n"
      << "[admin]\nendpoint = \"" << endpoint << "\"\nevents = \"" << events << "\"\n"
      << extra;
    t.close();
    serve = std::make_unique<test::serve_process>(std::vector<std::string>{path});
    actors::admin_client_config c;
    c.endpoint = endpoint;
    c.events = events;
    c.timeout = std::chrono::milliseconds(60000);
    admin = std::make_unique<actors::admin_client>(c);
  }
  json call(const std::string& cmd, const std::vector<std::string>& args = {}) {
    const auto r = admin->call(cmd, args);
    if (!r.ok) return {{"error", r.error}};
    return r.result;
  }
  std::string state(const std::string& replica) {
    const json s = call("status");
    for (const auto& r : s["replicas"])
      if (r["name"] == replica) return r["state"];
    return "";
  }
};

// Asks `pred` again and again until it holds or `limit` passes (each ask is a round trip to the
// server, so this polls at the server's pace).
bool within(std::chrono::seconds limit, const std::function<bool()>& pred) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end)
    if (pred()) return true;
  return false;
}

std::vector<int> complete_all(std::uint16_t port, int n, int max_tokens, const std::function<void()>& during = {}) {
  std::vector<std::future<int>> fs;
  for (int i = 0; i < n; ++i)
    fs.push_back(std::async(std::launch::async, [=] {
      const json body{{"prompt", "scale " + std::to_string(i)}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
      const auto r = test::post_json(port, "/v1/completions", body);
      return r.status == 200 ? json::parse(r.body)["usage"]["completion_tokens"].get<int>() : -r.status;
    }));
  if (during) during();
  std::vector<int> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(scale_up_takes_a_warm_replica_and_scale_down_under_load_loses_nothing) {
  cluster c("scale-test", "[scheduler]\nmax_seqs = 2\n");
  BOOST_TEST_REQUIRE(c.serve->port() != 0);
  BOOST_TEST(c.state("main-0") == "running");
  BOOST_TEST(c.state("main-1") == "warm");
  const json pool = c.call("status")["pools"][0];
  BOOST_TEST(pool["replicas"] == 1);
  BOOST_TEST(pool["warm"] == 1);
  BOOST_TEST(pool["max"] == 2);
  BOOST_TEST(c.call("scale", {"main", "3"})["error"].get<std::string>().find("runs 1 to 2 replicas") != std::string::npos);
  BOOST_TEST(c.call("scale", {"nope", "1"})["error"].get<std::string>().find("no pool named 'nope'") != std::string::npos);

  const json up = c.call("scale", {"main", "2"});
  BOOST_TEST(up["added"] == json::array({"main-1"}), up.dump());
  BOOST_TEST(c.state("main-1") == "running");
  for (int t : complete_all(c.serve->port(), 8, 16)) BOOST_TEST(t == 16);
  std::uint64_t on_new = 0;
  const json kv = c.call("kv", {"main-1"});
  for (const auto& r : kv["replicas"]) on_new = r["prefix_queries"];
  BOOST_TEST(on_new > 0u, "the added replica served");

  json down;
  const auto tokens = complete_all(c.serve->port(), 8, 48, [&] { down = c.call("scale", {"main", "1"}); });
  for (int t : tokens) BOOST_TEST(t == 48, "a request was lost or cut short by the scale-down: " << t);
  BOOST_TEST(down["removed"] == json::array({"main-1"}), down.dump());
  BOOST_TEST(c.state("main-1") == "warm");
  BOOST_TEST(c.call("status")["pools"][0]["replicas"] == 1);
}

BOOST_AUTO_TEST_CASE(the_autoscaler_adds_the_warm_replica_under_a_queue_and_returns_to_min_when_quiet) {
  cluster c("autoscale-test",
            "[scheduler]\nmax_seqs = 1\n"
            "[autoscaler]\ninterval = \"100ms\"\nqueue_up = 1\nqueue_down = 0.5\nup_for = \"200ms\"\ndown_for = \"1s\"\ncooldown = \"500ms\"\n");
  BOOST_TEST_REQUIRE(c.serve->port() != 0);
  BOOST_TEST(c.call("autoscaler")["paused"] == false);
  bool scaled_up = false;
  std::vector<int> later;
  const auto tokens = complete_all(c.serve->port(), 8, 64, [&] {
    scaled_up = within(std::chrono::seconds(120), [&] { return c.state("main-1") == "running"; });
    // Queued requests stay where they were placed; new ones go to the replica it added.
    if (scaled_up) later = complete_all(c.serve->port(), 4, 16);
  });
  for (int t : tokens) BOOST_TEST(t == 64);
  for (int t : later) BOOST_TEST(t == 16);
  BOOST_TEST_REQUIRE(scaled_up, "the autoscaler never added main-1");
  std::uint64_t on_new = 0;
  const json kv = c.call("kv", {"main-1"});
  for (const auto& r : kv["replicas"]) on_new = r["prefix_queries"];
  BOOST_TEST(on_new > 0u, "the replica it added served");
  const json st = c.call("autoscaler");
  BOOST_TEST(st["last_decisions"]["main"].get<std::string>().find("queue") != std::string::npos, st.dump());
  const bool back = within(std::chrono::seconds(60), [&] { return c.state("main-1") == "warm"; });
  BOOST_TEST(back, "it did not return to min_replicas once quiet");
  BOOST_TEST(c.call("autoscaler", {"pause"})["paused"] == true);
  BOOST_TEST(c.call("autoscaler", {"pin", "main"})["pinned"] == json::array({"main"}));
  BOOST_TEST(c.call("set-policy", {"autoscaler", "default", "queue_up=3"})["policy"]["queue_up"] == 3.0);
  BOOST_TEST(c.call("set-policy", {"autoscaler", "default", "queue_down=5"})["error"].get<std::string>().find("below queue_up") !=
             std::string::npos);
}

// examples/external_controller.cpp, a separate process speaking the admin protocol, scales the
// pool up under a queue, and the replica it added serves.
BOOST_AUTO_TEST_CASE(an_external_controller_scales_the_pool_through_the_admin_protocol) {
  cluster c("external-controller-test", "[scheduler]\nmax_seqs = 1\n");
  BOOST_TEST_REQUIRE(c.serve->port() != 0);
  test::child_process controller({std::string(TROUPE_BINARY_DIR) + "/examples/example_external_controller", "--endpoint", c.endpoint,
                                  "--events", c.events, "--pool", "main", "--high", "1", "--low", "0.5", "--for", "120"});
  BOOST_TEST_REQUIRE(controller.started());
  bool scaled = false;
  std::vector<int> later;
  const auto tokens = complete_all(c.serve->port(), 8, 64, [&] {
    scaled = controller.wait_for_line("scaled main to 2");
    if (scaled) later = complete_all(c.serve->port(), 4, 16);
  });
  for (int t : tokens) BOOST_TEST(t == 64);
  for (int t : later) BOOST_TEST(t == 16);
  BOOST_TEST_REQUIRE(scaled);
  const json kv = c.call("kv", {"main-1"});
  BOOST_TEST(kv["replicas"][0]["prefix_queries"].get<std::uint64_t>() > 0u, kv.dump());
}
