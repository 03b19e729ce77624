// Several heads over the same nodes (configs/two-heads.toml, as real processes): kill -9 of one
// head under load loses nothing that went through the other head (every request completes with
// the engine's tokens), the nodes keep their replicas, and a restarted head serves again. And
// each head serves the admin protocol for the whole cluster: a drain or a scale made through
// one head's console holds for the other head's router too.
#define BOOST_TEST_MODULE multi_head
#include <boost/test/unit_test.hpp>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "actors/control/admin_client.h"
#include "runtime/metrics/metrics.h"
#include "runtime/engine/engine.h"
#include "topology/topology.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";
std::string tiny() { return test::tiny_model_dir(); }

// configs/two-heads.toml with the heads on free ports (tests run in parallel).
std::string topology_file(std::uint16_t port_a, std::uint16_t port_b) {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/configs/two-heads.toml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  text.replace(text.find("127.0.0.1:7720"), 14, "127.0.0.1:" + std::to_string(port_a));
  text.replace(text.find("127.0.0.1:7721"), 14, "127.0.0.1:" + std::to_string(port_b));
  for (const char* admin_port : {"7620", "7621", "7622", "7623"})  // the heads' admin endpoints
    text.replace(text.find(std::string("127.0.0.1:") + admin_port), 14, "127.0.0.1:" + std::to_string(test::free_port()));
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/multi-head-test.toml";
  std::ofstream(path) << text;
  return path;
}

// configs/two-heads.toml as real processes: both heads, and both nodes, each joining both. The
// cluster token is in the environment while it lives.
struct two_heads {
  struct token_env {
    explicit token_env(const char* t) { ::setenv("TROUPE_CLUSTER_TOKEN", t, 1); }
    ~token_env() { ::unsetenv("TROUPE_CLUSTER_TOKEN"); }
  } token;
  std::uint16_t reg_a = test::free_port(), reg_b = test::free_port();
  std::string config = topology_file(reg_a, reg_b);
  topology::topology_config topo = topology::load_topology(config);
  std::unique_ptr<test::serve_process> head_a = start("head-a"), head_b = start("head-b");
  test::child_process node_a{std::vector<std::string>{troupe_bin, "node", config, "--name", "node-a", "--model", tiny()}};
  test::child_process node_b{std::vector<std::string>{troupe_bin, "node", config, "--name", "node-b", "--model", tiny()}};

  explicit two_heads(const char* cluster_token) : token(cluster_token) {}
  // A (new) process of head `name`.
  std::unique_ptr<test::serve_process> start(const std::string& name) const {
    return std::make_unique<test::serve_process>(std::vector<std::string>{
        config, "--name", name, "--model", tiny(), "--registry-port", std::to_string(name == "head-a" ? reg_a : reg_b)});
  }
  // The admin console of head `name`.
  actors::admin_client_config admin(const std::string& name, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const {
    actors::admin_client_config c;
    c.endpoint = topology::admin_of(topo, name).endpoint;
    c.events = topology::admin_of(topo, name).events;
    c.timeout = timeout;
    return c;
  }
};

std::vector<std::int32_t> prompt_of(int i) {
  std::vector<std::int32_t> p;
  for (int k = 0; k < 6 + i % 5; ++k) p.push_back((i * 131 + k * 17 + 5) % 500 + 3);
  return p;
}

const int max_tokens = 24;

// The engine's own greedy text for prompt i (the reference every served request must equal).
std::string expected_text(int i) {
  static auto model = std::shared_ptr<const model::llama_model>(model::llama_model::load(tiny()));
  static auto tok = std::shared_ptr<const tokenizer::tokenizer>(tokenizer::tokenizer::load(tiny() + "/tokenizer.json"));
  auto e = engine::cpu_engine(model, tok, {});
  engine::request r;
  r.id = "x";
  r.prompt = prompt_of(i);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return tok->decode(engine::generate_all(e, {r})[0]);
}

json body_of(int i) { return {{"prompt", prompt_of(i)}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}; }

// Polls /health until `replicas` replicas are live there or 60 s pass.
bool await_replicas(std::uint16_t port, int replicas) {
  const auto deadline = clock_type::now() + std::chrono::seconds(60);
  while (clock_type::now() < deadline) {
    try {
      auto r = test::http_request(port, "GET", "/health");
      if (r.status == 200 && r.json()["replicas_live"] == replicas) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(killing_one_head_loses_nothing_through_the_other_and_a_restarted_head_serves) {
  two_heads c("multi-head-test-cluster-token");
  auto& head_a = c.head_a;
  auto& head_b = *c.head_b;
  BOOST_TEST_REQUIRE(head_a->port() != 0);
  BOOST_TEST_REQUIRE(head_b.port() != 0);
  BOOST_TEST_REQUIRE(c.node_a.wait_for_line("ready, 1 replica(s) registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(c.node_b.wait_for_line("ready, 1 replica(s) registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(await_replicas(head_a->port(), 2));
  BOOST_TEST_REQUIRE(await_replicas(head_b.port(), 2));

  // Load through both heads; head-a dies under it once its first stream has a token.
  const int n = 24;
  std::vector<std::future<test::http_response>> through_b, through_a;
  for (int i = 0; i < n; ++i) {
    through_b.push_back(std::async(std::launch::async, [&, i] { return test::post_json(head_b.port(), "/v1/completions", body_of(i)); }));
    through_a.push_back(std::async(std::launch::async, [&, i] {
      try {
        return test::post_json(head_a->port(), "/v1/completions", body_of(n + i));
      } catch (const std::exception&) {
        return test::http_response{};  // cut off with its head: expected
      }
    }));
  }
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket stream(ioc);  // a stream through head-a, cut by its death
  stream.connect({boost::asio::ip::make_address("127.0.0.1"), head_a->port()});
  const json stream_body = {{"prompt", prompt_of(1)}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}, {"temperature", 0}};
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(stream_body.dump().size()) + "\r\n\r\n" + stream_body.dump();
  boost::asio::write(stream, boost::asio::buffer(req));
  std::string streamed;
  char buf[4096];
  while (streamed.find("\"text\"") == std::string::npos) streamed.append(buf, stream.read_some(boost::asio::buffer(buf)));
  const auto killed = clock_type::now();
  head_a->child().kill(SIGKILL);
  head_a->child().reap();
  // What its client sees (docs/runtime.md, "Several heads"): the connection ends without the
  // stream's end, no finish_reason, no [DONE], no last chunk, which clients report as an error
  // (the official SDKs throw); the same request sent again to the other head is answered whole.
  for (boost::system::error_code ec; !ec;) {
    const std::size_t n = stream.read_some(boost::asio::buffer(buf), ec);
    streamed.append(buf, n);
  }
  BOOST_TEST(streamed.find("data: [DONE]") == std::string::npos);
  BOOST_TEST(streamed.find("\r\n0\r\n\r\n") == std::string::npos, "a cut stream ended like a finished one");
  BOOST_TEST(streamed.find("\"finish_reason\":\"length\"") == std::string::npos);
  json retry_body = stream_body;
  retry_body.erase("stream");
  const auto retried = test::post_json(head_b.port(), "/v1/completions", retry_body);
  BOOST_TEST(retried.status == 200, retried.body);

  int lost = 0, wrong = 0;
  for (int i = 0; i < n; ++i) {
    const auto r = through_b[std::size_t(i)].get();
    if (r.status != 200) {
      ++lost;
      BOOST_TEST_MESSAGE("through head-b, request " << i << ": " << r.status << " " << r.body);
      continue;
    }
    wrong += r.json()["choices"][0]["text"].get<std::string>() != expected_text(i);
  }
  BOOST_TEST(lost == 0);
  BOOST_TEST(wrong == 0);
  int a_done = 0;
  for (auto& f : through_a) a_done += f.get().status == 200;
  BOOST_TEST_MESSAGE("through the killed head: " << a_done << " of " << n << " had finished before the kill");
  BOOST_TEST(await_replicas(head_b.port(), 2));  // the nodes kept their replicas
  // The nodes aborted the dead head's requests (their owner is gone): nothing runs for nobody.
  const auto running_deadline = clock_type::now() + std::chrono::seconds(60);
  double running = -1;
  do {
    running = metrics::sum_samples(test::http_request(head_b.port(), "GET", "/metrics").body, "troupe:num_requests_running").value_or(-1);
  } while (running != 0 && clock_type::now() < running_deadline);
  BOOST_TEST(running == 0);

  // The same head again: the nodes rejoin it and it serves.
  head_a = c.start("head-a");
  BOOST_TEST_REQUIRE(head_a->port() != 0);
  BOOST_TEST_REQUIRE(await_replicas(head_a->port(), 2));
  // The nodes saw a newer process of head-a (its generation grew), not the old one back.
  BOOST_TEST(c.node_a.wait_for_line("rejoined head head-a (restarted: generation"));
  const double serving_after = std::chrono::duration<double>(clock_type::now() - killed).count();
  auto again = test::post_json(head_a->port(), "/v1/completions", body_of(3));
  BOOST_TEST_REQUIRE(again.status == 200, again.body);
  BOOST_TEST(again.json()["choices"][0]["text"].get<std::string>() == expected_text(3));
  BOOST_TEST_MESSAGE("restarted head-a serves with both replicas " << serving_after << " s after the kill");
}

namespace {

json call(actors::admin_client& c, const std::string& cmd, const std::vector<std::string>& args = {}) {
  const auto r = c.call(cmd, args);
  if (!r.ok) return {{"error", r.error}};
  return r.result;
}

json replica_in(const json& status, const std::string& name) {
  for (const auto& r : status["replicas"])
    if (r["name"] == name) return r;
  return nullptr;
}

// Asks `c` for `name`'s state until it is `state`, for at most 60 s (another head's router
// follows a replica's report within about a second).
bool becomes(actors::admin_client& c, const std::string& name, const std::string& state) {
  const auto deadline = clock_type::now() + std::chrono::seconds(60);
  while (clock_type::now() < deadline)
    if (replica_in(call(c, "status"), name)["state"] == state) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_head_serves_the_admin_protocol_for_the_whole_cluster) {
  two_heads c("multi-head-admin-test-token");
  auto& head_a = *c.head_a;
  auto& head_b = *c.head_b;
  BOOST_TEST_REQUIRE(head_a.port() != 0);
  BOOST_TEST_REQUIRE(head_b.port() != 0);
  BOOST_TEST_REQUIRE(c.node_a.wait_for_line("registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(c.node_b.wait_for_line("registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(c.admin("head-a").endpoint != c.admin("head-b").endpoint);
  actors::admin_client a(c.admin("head-a")), b(c.admin("head-b"));

  // Both consoles see every replica of the cluster.
  for (auto* c : {&a, &b}) {
    BOOST_TEST_REQUIRE(becomes(*c, "main-1", "running"));
    const json s = call(*c, "status");
    BOOST_TEST(replica_in(s, "main-0")["state"] == "running", s.dump());
    BOOST_TEST(replica_in(s, "main-0")["node"] == "node-a");
    BOOST_TEST(replica_in(s, "main-2")["state"] == "stopped", s.dump());
    BOOST_TEST(s["nodes"].size() == 4u);
  }

  // Drained through head-a: head-b's router places nothing on it either.
  const json drained = call(a, "drain", {"main-0"});
  BOOST_TEST_REQUIRE(drained["state"] == "drained", drained.dump());
  BOOST_TEST(becomes(b, "main-0", "drained"));
  const auto before = call(b, "kv", {"main-0"})["replicas"][0]["prefix_queries"].get<std::uint64_t>();
  std::vector<std::future<test::http_response>> through_b;
  for (int i = 0; i < 8; ++i)
    through_b.push_back(std::async(std::launch::async, [&, i] { return test::post_json(head_b.port(), "/v1/completions", body_of(i)); }));
  for (int i = 0; i < 8; ++i) {
    const auto r = through_b[std::size_t(i)].get();
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    BOOST_TEST(r.json()["choices"][0]["text"].get<std::string>() == expected_text(i));
  }
  BOOST_TEST(call(b, "kv", {"main-0"})["replicas"][0]["prefix_queries"].get<std::uint64_t>() == before,
             "head-b placed requests on the replica head-a drained");
  BOOST_TEST(call(a, "resume", {"main-0"})["state"] == "running");
  BOOST_TEST(becomes(b, "main-0", "running"));

  // Scaled up through head-b: main-2 starts on node-a, and head-a's router has it too.
  const json up = call(b, "scale", {"main", "3"});
  BOOST_TEST_REQUIRE(up["added"] == json::array({"main-2"}), up.dump());
  BOOST_TEST(becomes(a, "main-2", "running"));
  std::uint64_t served = 0;
  for (int round = 0; round < 5 && served == 0; ++round) {
    std::vector<std::future<test::http_response>> through_a;
    for (int i = 0; i < 9; ++i)
      through_a.push_back(std::async(std::launch::async, [&, i] { return test::post_json(head_a.port(), "/v1/completions", body_of(20 + i)); }));
    for (auto& f : through_a) BOOST_TEST(f.get().status == 200);
    served = call(a, "kv", {"main-2"})["replicas"][0]["prefix_queries"].get<std::uint64_t>();
  }
  BOOST_TEST(served > 0u, "head-a never placed on the replica head-b started");

  // Scaled down through head-a: main-2 drains and stops, and head-b's console says so.
  const json down = call(a, "scale", {"main", "2"});
  BOOST_TEST_REQUIRE(down["removed"] == json::array({"main-2"}), down.dump());
  BOOST_TEST(becomes(a, "main-2", "stopped"));
  BOOST_TEST(becomes(b, "main-2", "stopped"));
}

// A rollout outlives the head running it: the other head's router follows its split while it
// runs, and once its head dies the other head takes it over from the records the nodes keep,
// where it stood (the same canary, share and step), and can end it.
BOOST_AUTO_TEST_CASE(a_rollout_outlives_the_head_running_it) {
  two_heads c("multi-head-rollout-test-token");
  auto& head_a = c.head_a;
  auto& head_b = *c.head_b;
  BOOST_TEST_REQUIRE(head_a->port() != 0);
  BOOST_TEST_REQUIRE(head_b.port() != 0);
  BOOST_TEST_REQUIRE(c.node_a.wait_for_line("registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(c.node_b.wait_for_line("registered with 2 head(s)"));
  actors::admin_client a(c.admin("head-a", std::chrono::seconds(120))), b(c.admin("head-b", std::chrono::seconds(120)));
  BOOST_TEST_REQUIRE(becomes(a, "main-1", "running"));
  BOOST_TEST_REQUIRE(becomes(b, "main-1", "running"));
  std::string baseline_key;  // once main-0 has reported its load to head-b
  for (auto until = clock_type::now() + std::chrono::seconds(60); baseline_key.empty() && clock_type::now() < until;)
    if (const json k = replica_in(call(b, "status"), "main-0")["model_key"]; k.is_string()) baseline_key = k.get<std::string>();
  BOOST_TEST_REQUIRE(!baseline_key.empty());

  model::synth_options o = test::preset("tiny");
  o.seed = 5;
  const std::string other = test::synth_model("tiny-llama-f32-seed5", o);
  const json started = call(a, "rollout", {"main", "--model", other, "--revision", "r2", "--canary", "50%", "--step", "50%:10m",
                                           "--max-ttft-ratio", "100", "--max-itl-ratio", "100"});
  BOOST_TEST_REQUIRE(started["phase"] == "canary", started.dump());
  const std::string canary_key = started["model_key"].get<std::string>();

  // head-b's router follows the split head-a runs: a request pinned to the canary is placed
  // there (with no split it would be refused).
  auto pinned_through_b = [&] {
    return test::http_request(head_b.port(), "POST", "/v1/completions", body_of(1).dump(), {{"X-Troupe-Split", "canary"}});
  };
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  test::http_response pinned;
  while ((pinned = pinned_through_b()).status != 200 && clock_type::now() < deadline) {
  }
  BOOST_TEST(pinned.status == 200, pinned.body);

  head_a->child().kill(SIGKILL);
  head_a->child().reap();
  json taken;  // head-b takes it over once head-a has been silent for a few seconds
  deadline = clock_type::now() + std::chrono::seconds(60);
  while (clock_type::now() < deadline) {
    const json s = call(b, "rollout", {"status", "main"});
    if (s.contains("rollouts") && !s["rollouts"].empty()) {
      taken = s["rollouts"][0];
      break;
    }
  }
  BOOST_TEST_REQUIRE(!taken.is_null(), "head-b never took the rollout over");
  BOOST_TEST(taken["phase"] == "canary", taken.dump());
  BOOST_TEST(taken["model_key"] == canary_key);
  BOOST_TEST(taken["share"] == 0.5);
  std::string reasons;
  for (const auto& d : taken["decisions"]) reasons += d["decision"].get<std::string>() + ": " + d["reason"].get<std::string>() + "\n";
  BOOST_TEST(reasons.find("step: ") != std::string::npos, reasons);  // head-a's decisions came along
  BOOST_TEST(reasons.find("taken_over: head head-b took it over from head head-a") != std::string::npos, reasons);

  // And ends it: every replica back on the baseline.
  BOOST_TEST_REQUIRE(call(b, "rollback", {"main"}).contains("phase"));
  json ended;
  deadline = clock_type::now() + std::chrono::seconds(120);
  while (clock_type::now() < deadline && (ended.is_null() || ended["phase"] == "rolling_back"))
    ended = call(b, "rollout", {"status", "main"})["rollouts"][0];
  BOOST_TEST(ended["phase"] == "rolled_back", ended.dump());
  for (const auto& r : call(b, "status")["replicas"])
    if (r["state"] == "running") BOOST_TEST(r["model_key"] == baseline_key, r.dump());
}
