// What a hostile or careless client did to `troupe serve` (issue 8), each case over real HTTP
// against a child process: deeply nested JSON, clients that half-close or leave, pipelined
// requests, a chat template that loops, a huge `user` label, API keys, and the small routes.
// Each case fails on the code before its fix (a crash, a leak, a hang or a wrong answer).
#define BOOST_TEST_MODULE hostile_client
#include <boost/test/unit_test.hpp>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>

#include <poll.h>

#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <thread>
#include <sstream>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "runtime/metrics/metrics.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;
namespace asio = boost::asio;

namespace {

std::string model_dir() { return test::synth_model("small-llama-f32", test::preset("small")); }
std::string local_toml() { return std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml"; }

double metric(std::uint16_t port, const std::string& name, const std::string& match = "") {
  return metrics::sum_samples(test::http_request(port, "GET", "/metrics").body, name, match).value_or(-1);
}

// Polls /metrics until `name` equals `want` or 60 s pass (the server closes connections on its
// own I/O thread, after the client's side is done); returns the last value seen.
double await_metric(std::uint16_t port, const std::string& name, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  double v = metric(port, name);
  while (v != want && std::chrono::steady_clock::now() < deadline) v = metric(port, name);
  return v;
}


// A raw connection with a receive timeout, so a server that never answers fails the test
// instead of hanging it.
struct raw_conn {
  asio::io_context ioc;
  asio::ip::tcp::socket sock{ioc};
  // rcvbuf > 0: the receive buffer (and so the window the server may fill) set before connecting.
  explicit raw_conn(std::uint16_t port, int timeout_s = 20, int rcvbuf = 0) {
    sock.open(asio::ip::tcp::v4());
    if (rcvbuf > 0) ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sock.connect({asio::ip::make_address("127.0.0.1"), port});
    timeval tv{timeout_s, 0};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void send(const std::string& data) { asio::write(sock, asio::buffer(data)); }
  void half_close() { sock.shutdown(asio::ip::tcp::socket::shutdown_send); }
  // Reads until `count` occurrences of `needle` arrived, EOF, or the timeout.
  std::string read_until_count(const std::string& needle, int count) {
    std::string got;
    char buf[8192];
    auto seen = [&] {
      int n = 0;
      for (std::size_t p = got.find(needle); p != std::string::npos; p = got.find(needle, p + 1)) ++n;
      return n;
    };
    while (seen() < count) {
      const ssize_t n = ::recv(sock.native_handle(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, std::size_t(n));
    }
    return got;
  }
};

std::string post_text(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct server_fixture {
  server_fixture() : serve({local_toml(), "--model", model_dir()}) {}
  test::serve_process serve;
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(one_server, server_fixture)

BOOST_AUTO_TEST_CASE(deeply_nested_json_gets_a_400_and_the_server_lives) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  for (const std::string& body : {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": " + deep + "}",
                                  "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"x\": " + deep + "}]}"}) {
    auto r = test::http_request(serve.port(), "POST", "/v1/chat/completions", body);
    BOOST_TEST(r.status == 400);
    BOOST_TEST(r.body.find("nested deeper than 128 levels") != std::string::npos, r.body);
  }
  BOOST_TEST(test::http_request(serve.port(), "GET", "/health").status == 200);
}

BOOST_AUTO_TEST_CASE(half_closed_clients_get_answers_and_their_connections_are_freed) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const int n = 2000;
  int answered = 0;
  for (int i = 0; i < 100; ++i) test::http_request(serve.port(), "GET", "/health");  // warm up before measuring
  const long rss_before = test::rss_kb(serve.child().pid());
  for (int i = 0; i < n; ++i) {
    raw_conn c(serve.port());
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    c.half_close();
    const std::string got = c.read_until_count("\r\n\r\n{", 1);
    answered += got.rfind("HTTP/1.1 200", 0) == 0;
  }
  BOOST_TEST(answered == n);
  // Only the scraping connection stays open: every session was freed.
  BOOST_TEST(await_metric(serve.port(), "troupe:http_connections_open", 1) == 1);
  BOOST_TEST_MESSAGE("RSS before " << rss_before << " kB, after " << n << " half-closed connections "
                                   << test::rss_kb(serve.child().pid()) << " kB");
}

BOOST_AUTO_TEST_CASE(clients_that_leave_mid_stream_or_while_queued_are_freed) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const long rss_before = test::rss_kb(serve.child().pid());
  const std::string body = json{{"prompt", std::vector<int>(20, 11)}, {"max_tokens", 500}, {"stream", true}, {"ignore_eos", true}}.dump();
  const int n = 300;
  for (int i = 0; i < n; ++i) {
    raw_conn c(serve.port());
    c.send(post_text("/v1/completions", body));
    if (i % 2) c.read_until_count("\"text\"", 1);  // mid-stream; the others leave while queued
  }  // each connection closes here
  BOOST_TEST(await_metric(serve.port(), "troupe:http_connections_open", 1) == 1);
  BOOST_TEST(await_metric(serve.port(), "troupe:num_requests_running", 0) == 0);
  BOOST_TEST(metric(serve.port(), "troupe:kv_cache_usage_perc") == 0);
  BOOST_TEST_MESSAGE("RSS before " << rss_before << " kB, after " << n << " clients that left "
                                   << test::rss_kb(serve.child().pid()) << " kB");
}

BOOST_AUTO_TEST_CASE(pipelined_requests_are_all_answered_at_once) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  raw_conn c(serve.port(), 30);  // the idle timeout (75 s) is what answered the second one before
  const std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string models = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  c.send(one + models + one);
  const std::string got = c.read_until_count("HTTP/1.1 200", 3);
  BOOST_TEST(got.find("\"object\":\"list\"") != std::string::npos);
  int answers = 0;
  for (std::size_t p = got.find("HTTP/1.1 200"); p != std::string::npos; p = got.find("HTTP/1.1 200", p + 1)) ++answers;
  BOOST_TEST(answers == 3);
}

BOOST_AUTO_TEST_CASE(a_huge_or_ever_new_user_does_not_grow_metrics) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::size_t before = test::http_request(serve.port(), "GET", "/metrics").body.size();
  const json one = {{"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"user", std::string(1 << 20, 'u')}};
  BOOST_TEST(test::post_json(serve.port(), "/v1/completions", one).status == 200);
  for (int i = 0; i < 150; ++i)
    BOOST_TEST_REQUIRE(test::post_json(serve.port(), "/v1/completions",
                                       {{"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"user", "tenant-" + std::to_string(i)}, {"priority", i}})
                           .status == 200);
  const std::string text = test::http_request(serve.port(), "GET", "/metrics").body;
  BOOST_TEST(text.find("uuuuuuuu") == std::string::npos);
  BOOST_TEST(text.find("tenant=\"tenant-0\"") != std::string::npos);
  BOOST_TEST(text.find("tenant=\"tenant-149\"") == std::string::npos);
  // Every request is counted, the ones past the bounds under "other".
  BOOST_TEST(metrics::sum_samples(text, "troupe:request_success_total").value_or(0) == 151);
  BOOST_TEST(metrics::sum_samples(text, "troupe:request_success_total", "tenant=\"other\"").value_or(0) >= 51);
  BOOST_TEST_MESSAGE("/metrics: " << before << " bytes before, " << text.size() << " after");
  BOOST_TEST(text.size() < 3 * 1024 * 1024);
}

BOOST_AUTO_TEST_CASE(routes_answer_with_the_right_status_and_shape) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  BOOST_TEST(test::http_request(serve.port(), "POST", "/health").status == 405);
  BOOST_TEST(test::http_request(serve.port(), "PUT", "/metrics").status == 405);
  BOOST_TEST(test::http_request(serve.port(), "POST", "/v1/models").status == 405);
  auto list = test::http_request(serve.port(), "GET", "/v1/models");
  const std::string id = list.json()["data"][0]["id"];
  BOOST_TEST(list.json()["data"][0]["created"].get<long long>() > 1600000000);
  auto one = test::http_request(serve.port(), "GET", "/v1/models/" + id);
  BOOST_TEST(one.status == 200);
  BOOST_TEST(one.json()["id"] == id);
  BOOST_TEST(one.json()["object"] == "model");
  BOOST_TEST(test::http_request(serve.port(), "GET", "/v1/models/nope").status == 404);
  // Counters exist at 0 before their first event (a rate over them works from the start).
  const std::string text = test::http_request(serve.port(), "GET", "/metrics").body;
  BOOST_TEST(metrics::sum_samples(text, "troupe:num_preemptions_total").value_or(-1) == 0);
  BOOST_TEST(metrics::sum_samples(text, "troupe:num_migrations_total").value_or(-1) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

// The test model under another name, with `chat_template` as its tokenizer_config.json's.
std::string model_with_template(const std::string& name, const std::string& chat_template) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/test-models/" + name;
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    std::filesystem::remove(dir + "/" + f);
    std::filesystem::create_symlink(model_dir() + "/" + f, dir + "/" + f);
  }
  std::ofstream(dir + "/tokenizer_config.json") << json{{"chat_template", chat_template}}.dump();
  return dir;
}

// A chat template from a model folder that loops range(100000000): it blocked every route and
// grew RSS 0.5 GB/s. Now the request fails alone with the budget named, and the server serves.
BOOST_AUTO_TEST_CASE(a_looping_chat_template_fails_its_request_only) {
  const std::string dir = model_with_template("hostile-template", "{% for i in range(100000000) %}{{ i }}{% endfor %}");
  test::serve_process serve({local_toml(), "--model", dir});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  for (int i = 0; i < 3; ++i) {
    auto r = test::post_json(serve.port(), "/v1/chat/completions", chat);
    BOOST_TEST(r.status == 400);
    BOOST_TEST(r.body.find("budget of 1000000 steps") != std::string::npos, r.body);
  }
  BOOST_TEST(test::http_request(serve.port(), "GET", "/health").status == 200);
  BOOST_TEST(test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", 2}}).status == 200);
  BOOST_TEST(test::rss_kb(serve.child().pid()) < 2 * 1024 * 1024);
}

// Eight chat requests whose template runs to its budget rendered on CAF's two workers, which
// /health, the router and every stream share: /health timed out at 30 s. Templates render on
// preparer threads of their own, so /health answers while they still render.
BOOST_AUTO_TEST_CASE(health_answers_while_templates_render_to_their_budget) {
  // Inside the budget (300,000 range items, as many copied for the loop and as many iterations).
  const std::string dir = model_with_template("slow-template", "{% for i in range(300000) %}{% endfor %}{{ messages[0]['content'] }}");
  test::serve_process serve({local_toml(), "--model", dir});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string chat = json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}}.dump();
  std::vector<std::unique_ptr<raw_conn>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<raw_conn>(serve.port(), 120));
    slow.back()->send(post_text("/v1/chat/completions", chat));
  }
  raw_conn health(serve.port(), 120);
  health.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  BOOST_TEST(health.read_until_count("\r\n\r\n", 1).rfind("HTTP/1.1 200", 0) == 0u);
  // When /health answered, the renders were not all done: some chat has no answer yet.
  int answered = 0;
  for (auto& c : slow) {
    pollfd p{c->sock.native_handle(), POLLIN, 0};
    answered += ::poll(&p, 1, 0) == 1;
  }
  BOOST_TEST(answered <= 4, answered << " of 8 renders had answered before /health did");
  for (auto& c : slow) {  // each renders whole
    const std::string got = c->read_until_count("\r\n\r\n", 1);
    BOOST_TEST(got.rfind("HTTP/1.1 200", 0) == 0u, got);
  }
}

// Optional API keys, as vLLM's --api-key: the OpenAI routes need the bearer token; /health and
// /metrics stay open.
BOOST_AUTO_TEST_CASE(api_keys_guard_the_openai_routes) {
  test::serve_process serve({local_toml(), "--model", model_dir(), "--api-key", "sekrit"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string body = json{{"prompt", {1, 2}}, {"max_tokens", 1}}.dump();
  auto no_key = test::http_request(serve.port(), "POST", "/v1/completions", body);
  BOOST_TEST(no_key.status == 401);
  BOOST_TEST(no_key.json()["error"]["type"] == "authentication_error");
  BOOST_TEST(test::http_request(serve.port(), "GET", "/v1/models").status == 401);
  BOOST_TEST(test::http_request(serve.port(), "POST", "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status == 401);
  BOOST_TEST(test::http_request(serve.port(), "POST", "/v1/completions", body, {{"Authorization", "Bearer sekrit"}}).status == 200);
  // The scheme is case-insensitive (RFC 9110): "bearer" in lower case was refused.
  for (const char* scheme : {"bearer sekrit", "BEARER sekrit", "Bearer  sekrit"})
    BOOST_TEST(test::http_request(serve.port(), "POST", "/v1/completions", body, {{"Authorization", scheme}}).status == 200, scheme);
  BOOST_TEST(test::http_request(serve.port(), "POST", "/v1/completions", body, {{"Authorization", "Basic sekrit"}}).status == 401);
  BOOST_TEST(test::http_request(serve.port(), "GET", "/health").status == 200);
  BOOST_TEST(test::http_request(serve.port(), "GET", "/metrics").status == 200);
}

// local.toml with `frontend` lines added (a [frontend] table of them).
std::string config_with_frontend(const std::string& name, const std::string& frontend) {
  std::ifstream in(local_toml());
  std::stringstream text;
  text << in.rdbuf();
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/" + name + ".toml";
  std::ofstream(path) << text.str() << "\n[frontend]\n" << frontend;
  return path;
}

// Waits until the server closes `c` (a read gives EOF or a reset) or `limit` passes; true if it did.
bool closed_by_server(raw_conn& c, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{c.sock.native_handle(), POLLIN, 200};
    if (::poll(&p, 1, 200) == 1) {
      const ssize_t n = ::recv(c.sock.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    }
  }
  return false;
}

// Slowloris: a thousand connections each sending its header a byte at a time were held for the
// whole idle timeout (75 s). A header must now be whole within header_timeout of its first
// byte; the server meanwhile answers others and lets go of every such connection.
BOOST_AUTO_TEST_CASE(headers_sent_a_byte_at_a_time_are_cut_off_at_the_header_timeout) {
  test::serve_process serve({config_with_frontend("slowloris", "header_timeout = \"2s\"\n"), "--model", model_dir()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string header = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(64, 'a');
  std::vector<std::unique_ptr<raw_conn>> slow;
  for (int i = 0; i < 1000; ++i) {
    slow.push_back(std::make_unique<raw_conn>(serve.port(), 60));
    slow.back()->send(header.substr(0, 1));
  }
  // Each sends one more byte every half second: never idle, never whole.
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (std::size_t at = 1; !stop && at < header.size(); ++at) {
      for (auto& c : slow) {
        boost::system::error_code ec;
        asio::write(c->sock, asio::buffer(header.substr(at, 1)), ec);
      }
      for (int k = 0; k < 5 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the trickle's pace, not a wait for the server
    }
  });
  BOOST_TEST(test::http_request(serve.port(), "GET", "/health").status == 200);  // served meanwhile
  int closed = 0;
  for (auto& c : slow) closed += closed_by_server(*c, std::chrono::seconds(45));
  stop = true;
  trickle.join();
  BOOST_TEST(closed == 1000);
  BOOST_TEST(await_metric(serve.port(), "troupe:http_connections_open", 1) == 1);
}

// A client that asks for a stream and never reads it held its batch slot for the whole answer;
// many of them held every slot while reading clients waited. Past max_unread bytes unread the
// client counts as gone: its request ends (its slot and KV freed) and its connection closes.
BOOST_AUTO_TEST_CASE(a_stream_nobody_reads_ends_once_its_unread_bytes_pass_the_bound) {
  test::serve_process serve({config_with_frontend("unread", "max_unread = \"4KiB\"\n"), "--model", model_dir()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string body =
      json{{"prompt", std::vector<int>(8, 11)}, {"max_tokens", 1000}, {"stream", true}, {"ignore_eos", true}, {"logprobs", 5}}.dump();
  std::vector<std::unique_ptr<raw_conn>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<raw_conn>(serve.port(), 60, 1024));  // a receive window that fills at once
    idle.back()->send(post_text("/v1/completions", body));
  }
  // Each request ends long before its 1,000 tokens: the server lets go of it.
  BOOST_TEST(await_metric(serve.port(), "troupe:num_requests_running", 0) == 0);
  BOOST_TEST(await_metric(serve.port(), "troupe:kv_cache_usage_perc", 0) == 0);  // the last aborts' blocks, freed a step later
  BOOST_TEST(metric(serve.port(), "troupe:generation_tokens_total") < 4 * 500);
  BOOST_TEST(await_metric(serve.port(), "troupe:http_connections_open", 1) == 1);
  // A client that reads gets its whole answer meanwhile.
  const auto r = test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", 16}, {"ignore_eos", true}});
  BOOST_TEST(r.status == 200, r.body);
}

// Grammars compiled on the preparers every request shares: two hostile schemas filled both and
// every other client waited behind them. Requests that may compile a grammar have a lane of
// their own, so a plain request is answered while a queue of them still compiles.
BOOST_AUTO_TEST_CASE(grammars_compiling_hold_up_no_request_that_needs_none) {
  test::serve_process serve({local_toml(), "--model", model_dir()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  // A pattern whose automaton grows past its budget: about half a second of compiling, then a 400.
  const std::string hostile = json{{"prompt", "x"}, {"max_tokens", 1}, {"guided_regex", "(.*a.{10}){3}"}}.dump();
  std::vector<std::unique_ptr<raw_conn>> schemas;
  for (int i = 0; i < 8; ++i) {
    schemas.push_back(std::make_unique<raw_conn>(serve.port(), 300));
    schemas.back()->send(post_text("/v1/completions", hostile));
  }
  const auto plain = test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", 1}});
  BOOST_TEST(plain.status == 200, plain.body);
  // When the plain request was answered, most schemas were still compiling or waiting for their
  // turn (sharing the preparers, it waited for half of them).
  int answered = 0;
  for (auto& c : schemas) {
    pollfd p{c->sock.native_handle(), POLLIN, 0};
    answered += ::poll(&p, 1, 0) == 1;
  }
  BOOST_TEST(answered <= 3, answered << " of 8 grammars were answered before the plain request");
  for (auto& c : schemas) {
    const std::string got = c->read_until_count("\r\n\r\n", 1);
    BOOST_TEST(got.rfind("HTTP/1.1 400", 0) == 0u, got.substr(0, 200));
  }
}
