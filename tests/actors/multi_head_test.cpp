// Several heads over the same nodes (configs/two-heads.toml, as real processes): kill -9 of one
// head under load loses nothing that went through the other head (every request completes with
// the engine's tokens), the nodes keep their replicas, and a restarted head serves again.
#define BOOST_TEST_MODULE multi_head
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "runtime/engine/engine.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";
std::string tiny() { return test::tiny_model_dir(); }

// configs/two-heads.toml with the heads on free ports (tests run in parallel).
std::string topology(std::uint16_t port_a, std::uint16_t port_b) {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/configs/two-heads.toml");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  text.replace(text.find("127.0.0.1:7720"), 14, "127.0.0.1:" + std::to_string(port_a));
  text.replace(text.find("127.0.0.1:7721"), 14, "127.0.0.1:" + std::to_string(port_b));
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/multi-head-test.toml";
  std::ofstream(path) << text;
  return path;
}

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
  const std::uint16_t reg_a = test::free_port(), reg_b = test::free_port();
  const std::string config = topology(reg_a, reg_b);
  ::setenv("TROUPE_CLUSTER_TOKEN", "multi-head-test-cluster-token", 1);
  auto head_a = std::make_unique<test::serve_process>(
      std::vector<std::string>{config, "--name", "head-a", "--model", tiny(), "--registry-port", std::to_string(reg_a)});
  test::serve_process head_b({config, "--name", "head-b", "--model", tiny(), "--registry-port", std::to_string(reg_b)});
  BOOST_TEST_REQUIRE(head_a->port() != 0);
  BOOST_TEST_REQUIRE(head_b.port() != 0);
  test::child_process node_a({troupe_bin, "node", config, "--name", "node-a", "--model", tiny()});
  test::child_process node_b({troupe_bin, "node", config, "--name", "node-b", "--model", tiny()});
  BOOST_TEST_REQUIRE(node_a.wait_for_line("ready, 1 replica(s) registered with 2 head(s)"));
  BOOST_TEST_REQUIRE(node_b.wait_for_line("ready, 1 replica(s) registered with 2 head(s)"));
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
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::socket s(ioc);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), head_a->port()});
    const std::string body = json{{"prompt", prompt_of(1)}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}}.dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    boost::asio::write(s, boost::asio::buffer(req));
    std::string got;
    char buf[4096];
    while (got.find("\"text\"") == std::string::npos) got.append(buf, s.read_some(boost::asio::buffer(buf)));
  }
  const auto killed = clock_type::now();
  head_a->child().kill(SIGKILL);
  head_a->child().reap();

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

  // The same head again: the nodes rejoin it and it serves.
  head_a = std::make_unique<test::serve_process>(
      std::vector<std::string>{config, "--name", "head-a", "--model", tiny(), "--registry-port", std::to_string(reg_a)});
  BOOST_TEST_REQUIRE(head_a->port() != 0);
  BOOST_TEST_REQUIRE(await_replicas(head_a->port(), 2));
  // The nodes saw a newer process of head-a (its generation grew), not the old one back.
  BOOST_TEST(node_a.wait_for_line("rejoined head head-a (restarted: generation"));
  const double serving_after = std::chrono::duration<double>(clock_type::now() - killed).count();
  auto again = test::post_json(head_a->port(), "/v1/completions", body_of(3));
  BOOST_TEST_REQUIRE(again.status == 200, again.body);
  BOOST_TEST(again.json()["choices"][0]["text"].get<std::string>() == expected_text(3));
  BOOST_TEST_MESSAGE("restarted head-a serves with both replicas " << serving_after << " s after the kill");
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
}
