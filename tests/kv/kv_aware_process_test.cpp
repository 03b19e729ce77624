// The KV cache as a findable object, end to end with real processes: configs/kv-aware.toml's
// events read by an independent decoder (kv_events_check.py: python3-zmq, python3-msgpack), and
// KV-aware routing across a head and a node process sending requests that share a prefix to
// the replica that holds it.
#define BOOST_TEST_MODULE kv_aware_process
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <future>
#include <regex>
#include <sstream>

#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";
std::string tiny() { return test::tiny_model_dir(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

bool await_replicas(std::uint16_t port, int replicas) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      auto r = test::http_request(port, "GET", "/health");
      if (r.status == 200 && r.json()["replicas_live"] == replicas) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

// The value of a /metrics sample, by name and one label that identifies it (0 if absent).
double metric(std::uint16_t port, const std::string& name, const std::string& label = "") {
  const std::string page = test::http_request(port, "GET", "/metrics").body;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name, 0) != 0 || (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ')) continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return 0;
}

std::vector<std::int32_t> prompt(int prefix, int question) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < 64; ++i) p.push_back((prefix * 977 + i * 131 + 7) % 500 + 3);
  for (int i = 0; i < 10; ++i) p.push_back((question * 313 + i * 71 + 1) % 500 + 3);
  return p;
}

test::http_response complete(std::uint16_t port, const std::vector<std::int32_t>& p) {
  return test::post_json(port, "/v1/completions", {{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
}

}  // namespace

BOOST_AUTO_TEST_CASE(kv_events_reach_an_independent_decoder_and_replay_fills_what_a_late_subscriber_missed) {
  const std::uint16_t pub = test::free_port(), rep = test::free_port();
  std::string text = read_file(std::string(TROUPE_SOURCE_DIR) + "/configs/kv-aware.toml");
  text = std::regex_replace(text, std::regex("127\\.0\\.0\\.1:5557"), "127.0.0.1:" + std::to_string(pub));
  text = std::regex_replace(text, std::regex("127\\.0\\.0\\.1:5558"), "127.0.0.1:" + std::to_string(rep));
  text = std::regex_replace(text, std::regex("\\[scheduler\\]"), "[scheduler]\nkv_dtype = \"int8\"");  // the batches name it
  const std::string config = write_config("kv-events-test.toml", text);
  test::serve_process server({config, "--model", tiny()});
  BOOST_TEST_REQUIRE(server.port() != 0);
  BOOST_TEST_REQUIRE(await_replicas(server.port(), 2));
  const auto r = test::run_command("/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/kv/kv_events_check.py tcp://127.0.0.1:" +
                                   std::to_string(pub) + " tcp://127.0.0.1:" + std::to_string(rep) + " " +
                                   std::to_string(server.port()) + " kv-events int8 2>&1");
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("kv events ok") != std::string::npos, r.output);
  BOOST_TEST(metric(server.port(), "troupe:kv_events_published_total") > 0);
  BOOST_TEST(metric(server.port(), "troupe:kv_events_dropped_total") == 0);
}

BOOST_AUTO_TEST_CASE(across_processes_requests_sharing_a_prefix_reach_the_replica_that_holds_it) {
  // One replica in the head's process, one in a node process.
  const std::uint16_t registry = test::free_port();
  const std::string config = write_config("kv-aware-two-process.toml", R"([model]
path = "models/small"
[[nodes]]
name = "head"
address = "127.0.0.1:)" + std::to_string(registry) + R"("
[[nodes]]
name = "worker"
[[pools]]
name = "main"
replicas = 2
nodes = ["head", "worker"]
[scheduler]
kv_memory = "64MiB"
[router]
policy = "kv_aware"
[timeouts]
heartbeat = "500ms"
connection = "5s"
)");
  ::setenv("TROUPE_CLUSTER_TOKEN", "kv-aware-process-test-token", 1);
  test::serve_process head({config, "--model", tiny(), "--registry-port", std::to_string(registry)});
  BOOST_TEST_REQUIRE(head.port() != 0);
  test::child_process node({troupe_bin, "node", config, "--name", "worker", "--model", tiny()});
  BOOST_TEST_REQUIRE(node.wait_for_line("ready, 1 replica(s) registered"));
  BOOST_TEST_REQUIRE(await_replicas(head.port(), 2));

  // Two system prompts start at once (each lands somewhere), then three questions on each,
  // one at a time: every question must find its system prompt's 64 tokens cached.
  auto a = std::async(std::launch::async, [&] { return complete(head.port(), prompt(1, 0)); });
  auto b = std::async(std::launch::async, [&] { return complete(head.port(), prompt(2, 0)); });
  BOOST_TEST_REQUIRE(a.get().status == 200);
  BOOST_TEST_REQUIRE(b.get().status == 200);
  const double hits_before = metric(head.port(), "troupe:prefix_cache_hits_total");
  for (int prefix : {1, 2})
    for (int q = 1; q <= 3; ++q) BOOST_TEST_REQUIRE(complete(head.port(), prompt(prefix, q)).status == 200);
  const double hits = metric(head.port(), "troupe:prefix_cache_hits_total") - hits_before;
  BOOST_TEST(hits == 6 * 64.0);  // the ideal: each question reuses its whole system prompt
  BOOST_TEST(metric(head.port(), "troupe:router_decisions_total", "reason=\"prefix_hit\"") >= 6.0);
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
}
