// troupe launch starts a topology's processes (here each node in its own network namespace),
// starts a node again when it dies, and stops everything on SIGTERM.
#define BOOST_TEST_MODULE launch
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <regex>

#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(launch_with_netns_restarts_a_killed_node_and_stops_cleanly) {
  BOOST_TEST_REQUIRE(::geteuid() == 0, "network namespaces need root");
  const std::string model_dir = test::synth_model("small-llama-f32", test::preset("small"));
  test::child_process launch({std::string(TROUPE_BINARY_DIR) + "/troupe", "launch",
                              std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml", "--netns", "--model", model_dir, "--port", "0"});
  BOOST_TEST_REQUIRE(launch.started());
  std::string line;
  BOOST_TEST_REQUIRE(launch.wait_for_line("started node-a", &line));
  std::smatch m;
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("pid ([0-9]+)")));
  const pid_t node_a = pid_t(std::stoi(m[1]));
  BOOST_TEST(line.find("in its own network namespace") != std::string::npos);
  BOOST_TEST_REQUIRE(launch.wait_for_line("node node-a: ready"));
  ::kill(node_a, SIGKILL);
  BOOST_TEST_REQUIRE(launch.wait_for_line("died; restarting it in", &line));  // after a backoff
  BOOST_TEST_REQUIRE(launch.wait_for_line("node-a restarted as pid", &line));
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("restarted as pid ([0-9]+)")));
  const pid_t again = pid_t(std::stoi(m[1]));
  BOOST_TEST_REQUIRE(launch.wait_for_line("node node-a: ready"));  // the new node-a joined the head
  launch.kill(SIGTERM);
  BOOST_TEST_REQUIRE(launch.wait_for_line("stopping"));
  const int status = launch.reap();
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  BOOST_TEST(::kill(again, 0) == -1);  // launch took its nodes with it
}

// kill -9 of the head stopped the whole cluster; now launch starts it again, the node keeps its
// replica and rejoins, and the new head serves.
BOOST_AUTO_TEST_CASE(launch_restarts_a_killed_head_and_the_node_rejoins_it) {
  const std::string model_dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  test::child_process launch({std::string(TROUPE_BINARY_DIR) + "/troupe", "launch",
                              std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml", "--model", model_dir, "--port", "0"});
  std::string line;
  BOOST_TEST_REQUIRE(launch.wait_for_line("started head (pid", &line));
  std::smatch m;
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("pid ([0-9]+)")));
  const pid_t head = pid_t(std::stoi(m[1]));
  BOOST_TEST_REQUIRE(launch.wait_for_line("started node-a (pid", &line));
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("pid ([0-9]+)")));
  const std::string node_a = m[1];
  BOOST_TEST_REQUIRE(launch.wait_for_line("node node-a: ready"));
  // node-a's replica holds its KV in a shared-memory segment named for its process.
  auto segments_of = [](const std::string& pid) {
    int n = 0;
    for (const auto& f : std::filesystem::directory_iterator("/dev/shm"))
      n += f.path().filename().string().rfind("troupe-kv-" + pid + "-", 0) == 0;
    return n;
  };
  BOOST_TEST(segments_of(node_a) > 0);
  ::kill(head, SIGKILL);
  BOOST_TEST_REQUIRE(launch.wait_for_line("head (pid " + std::to_string(head) + ") died; restarting it in"));
  BOOST_TEST_REQUIRE(launch.wait_for_line("head restarted as pid"));
  BOOST_TEST_REQUIRE(launch.wait_for_line("node node-a: rejoined head head"));
  launch.kill(SIGTERM);
  BOOST_TEST_REQUIRE(launch.wait_for_line("stopping"));
  const int status = launch.reap();
  BOOST_TEST(WIFEXITED(status));
  // A node stopped by SIGTERM died at the signal's default action and left its segment behind.
  BOOST_TEST(segments_of(node_a) == 0, "node-a's KV segment is still in /dev/shm");
}

// A node that died 6 times within 60 s was given up for good: still down 140 s later while
// /health answered 200 at half the capacity, saying nothing. Past its restart intensity it is
// now paused (--restart-pause) and tried again, and /health names what is down meanwhile.
BOOST_AUTO_TEST_CASE(a_node_that_keeps_dying_is_paused_then_restarted_and_health_says_it_is_down) {
  const std::string model_dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  test::child_process launch({std::string(TROUPE_BINARY_DIR) + "/troupe", "launch", std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml",
                              "--model", model_dir, "--port", "0", "--restart-pause", "20s"});
  std::string line;
  BOOST_TEST_REQUIRE(launch.wait_for_line("listening on http://127.0.0.1:", &line));
  const std::uint16_t port = std::uint16_t(std::stoi(line.substr(line.find("127.0.0.1:") + 10)));
  std::smatch m;
  BOOST_TEST_REQUIRE(launch.wait_for_line("started node-a (pid", &line));
  BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("pid ([0-9]+)")));
  pid_t node_a = pid_t(std::stoi(m[1]));
  for (int death = 0; death < 6; ++death) {  // each restart killed at once, six deaths within a minute
    ::kill(node_a, SIGKILL);
    if (death == 5) break;
    BOOST_TEST_REQUIRE(launch.wait_for_line("node-a restarted as pid", &line));
    BOOST_TEST_REQUIRE(std::regex_search(line, m, std::regex("restarted as pid ([0-9]+)")));
    node_a = pid_t(std::stoi(m[1]));
  }
  BOOST_TEST_REQUIRE(launch.wait_for_line("pausing 20 s before restarting it", &line), line);
  // Paused: the head serves on node-b, and says node-a's replica is down.
  nlohmann::json health;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  do {
    const auto r = test::http_request(port, "GET", "/health");
    health = nlohmann::json::parse(r.body, nullptr, false);
  } while ((!health.is_object() || !health.contains("down")) && std::chrono::steady_clock::now() < deadline);
  BOOST_TEST(health["status"] == "degraded", health.dump());
  BOOST_TEST(health["down"].dump().find("decode-0") != std::string::npos, health.dump());
  BOOST_TEST(health["replicas_live"] == 1, health.dump());
  BOOST_TEST_REQUIRE(launch.wait_for_line("node-a restarted as pid"));  // after the pause
  BOOST_TEST_REQUIRE(launch.wait_for_line("node node-a: ready"));
  launch.kill(SIGTERM);
  BOOST_TEST_REQUIRE(launch.wait_for_line("stopping"));
  launch.reap();
}
