// The log of `troupe serve --log-format json --log-level debug`: a request ends with one line naming it (its
// client's X-Request-Id as the trace, returned in the response header too), its replica, its
// tokens, its phase times and its outcome, and the replica's own lines about it carry the same
// trace; an X-Request-Id a client could forge lines with is replaced by the request's id.
#define BOOST_TEST_MODULE request_log
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

// The log's JSON lines so far with event `event` and field trace == `trace`.
std::vector<json> lines(const std::string& file, const std::string& event, const std::string& trace) {
  std::ifstream in(file);
  std::vector<json> out;
  for (std::string l; std::getline(in, l);) {
    const json j = json::parse(l, nullptr, false);
    if (j.is_object() && j.value("event", "") == event && j.value("trace", "") == trace) out.push_back(j);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_request_ends_with_one_log_line_carrying_its_trace_id) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/request-log";
  test::run_command("rm -rf " + dir + " && mkdir -p " + dir);
  {
    std::ofstream t(dir + "/t.toml");
    t << "[model]\npath = \"" << test::synth_model("tiny-llama-f32", test::preset("tiny")) << "\"\n"
      << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n[[pools]]\nname = \"main\"\nreplicas = 1\n";
  }
  const std::string log_file = dir + "/serve.log";
  const std::uint16_t port = test::free_port();
  test::child_process serve({"/bin/sh", "-c",
                             "exec " + std::string(TROUPE_BINARY_DIR) + "/troupe serve " + dir + "/t.toml --port " + std::to_string(port) +
                                 " --registry-port 0 --log-format json --log-level debug 2> " + log_file});
  BOOST_TEST_REQUIRE(serve.wait_for_line("listening on"));
  const json body{{"prompt", "hello"}, {"max_tokens", 5}, {"ignore_eos", true}};
  const auto r = test::http_request(port, "POST", "/v1/completions", body.dump(), {{"X-Request-Id", "client-trace.42"}});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  BOOST_TEST(r.headers.at("x-request-id") == "client-trace.42");
  const std::string id = json::parse(r.body)["id"].get<std::string>();

  // The line is written before the last tokens leave the head; poll the file a bounded time.
  std::vector<json> ends;
  for (int i = 0; i < 2000 && ends.empty(); ++i) ends = lines(log_file, "request_end", "client-trace.42");
  BOOST_TEST_REQUIRE(ends.size() == 1u);
  const json& e = ends[0];
  BOOST_TEST(e["id"] == id);
  BOOST_TEST(e["level"] == "info");
  BOOST_TEST(e["replicas"] == json::array({"main-0"}));
  BOOST_TEST(e["output_tokens"] == 5);
  BOOST_TEST(e["outcome"] == "length");
  for (const char* k : {"queue_s", "prefill_s", "decode_s", "prompt_tokens", "tenant", "ts"}) BOOST_TEST(e.contains(k), k);
  // The replica's own lines about it carry the same trace (debug level).
  BOOST_TEST(lines(log_file, "replica_request_start", "client-trace.42").size() == 1u);
  const auto replica_end = lines(log_file, "replica_request_end", "client-trace.42");
  BOOST_TEST_REQUIRE(replica_end.size() == 1u);
  BOOST_TEST(replica_end[0]["id"] == id);
  BOOST_TEST(replica_end[0]["outcome"] == "length");

  // A header that could forge or bloat lines is not used: the request's id is the trace.
  const auto bad = test::http_request(port, "POST", "/v1/completions", body.dump(), {{"X-Request-Id", "x y\" INFO forged"}});
  BOOST_TEST_REQUIRE(bad.status == 200);
  const std::string bad_id = json::parse(bad.body)["id"].get<std::string>();
  BOOST_TEST(bad.headers.at("x-request-id") == bad_id);
  std::vector<json> bad_end;
  for (int i = 0; i < 2000 && bad_end.empty(); ++i) bad_end = lines(log_file, "request_end", bad_id);
  BOOST_TEST(bad_end.size() == 1u);
  // Errors carry the header as well.
  const auto refused = test::http_request(port, "POST", "/v1/completions", "{\"prompt\": 3}", {{"X-Request-Id", "err-1"}});
  BOOST_TEST(refused.status == 400);
  BOOST_TEST(refused.headers.at("x-request-id") == "err-1");
}

// [frontend] request_trace: every finished request is one line of the trace format `troupe bench
// serve --trace` replays (lengths, tenant, model, endpoint; no text), and the replay of the
// completions it recorded sends the same work again: the server records the same lengths twice.
BOOST_AUTO_TEST_CASE(the_request_trace_records_each_request_and_replays) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/request-trace";
  test::run_command("rm -rf " + dir + " && mkdir -p " + dir);
  const std::string trace = dir + "/requests.jsonl";
  {
    std::ofstream t(dir + "/t.toml");
    t << "[model]\npath = \"" << test::synth_model("tiny-llama-f32", test::preset("tiny")) << "\"\n"
      << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n[[pools]]\nname = \"main\"\nreplicas = 1\n"
      << "[frontend]\nmodel_name = \"tiny\"\nrequest_trace = \"" << trace << "\"\n";
  }
  test::serve_process serve({dir + "/t.toml"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  std::vector<std::pair<int, int>> sent;  // (prompt tokens, output tokens) of each completion
  for (int i = 0; i < 6; ++i) {
    std::vector<int> prompt;
    for (int p = 0; p < 5 + 3 * i; ++p) prompt.push_back(3 + (i * 7 + p) % 50);
    const json body{{"prompt", prompt}, {"max_tokens", 2 + i}, {"ignore_eos", true}, {"user", i % 2 ? "alice" : "bob"}};
    const auto r = test::post_json(serve.port(), "/v1/completions", body);
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    sent.emplace_back(int(prompt.size()), 2 + i);
  }
  const json chat{{"messages", json::array({{{"role", "user"}, {"content", "hello there"}}})}, {"max_tokens", 3}, {"ignore_eos", true}};
  BOOST_TEST_REQUIRE(test::post_json(serve.port(), "/v1/chat/completions", chat).status == 200);

  auto read_lines = [&] {
    std::ifstream in(trace);
    std::vector<json> out;
    for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
    return out;
  };
  const auto recorded = read_lines();
  BOOST_TEST_REQUIRE(recorded.size() == 7u);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const json& l = recorded[i];
    BOOST_TEST(l["prompt_len"] == sent[i].first);
    BOOST_TEST(l["output_len"] == sent[i].second);
    BOOST_TEST(l["tenant"] == (i % 2 ? "alice" : "bob"));
    BOOST_TEST(l["model"] == "tiny");
    BOOST_TEST(l["endpoint"] == "completions");
    BOOST_TEST(l["outcome"] == "length");
    BOOST_TEST(l["timestamp"].get<double>() > 1.7e9);
    BOOST_TEST(!l.contains("prompt"));  // lengths, never text
  }
  BOOST_TEST(recorded[6]["endpoint"] == "chat");

  // Replayed as recorded: the chat line is refused by name in a completions run ...
  const std::string bench = std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --quiet --url http://127.0.0.1:" +
                            std::to_string(serve.port()) + " --trace ";
  const auto mixed = test::run_command(bench + trace + " 2>&1");
  BOOST_TEST(mixed.status != 0);
  BOOST_TEST(mixed.output.find("add --chat") != std::string::npos, mixed.output);
  // ... and its completions sent again give the server the same lengths to record.
  {
    std::ofstream out(dir + "/completions.jsonl");
    for (std::size_t i = 0; i < sent.size(); ++i) out << recorded[i].dump() << "\n";
  }
  const auto replay = test::run_command(bench + dir + "/completions.jsonl 2>&1");
  BOOST_TEST_REQUIRE(replay.status == 0, replay.output);
  const auto after = read_lines();
  BOOST_TEST_REQUIRE(after.size() == 13u);
  std::multiset<std::pair<int, int>> want(sent.begin(), sent.end()), got;
  for (std::size_t i = 7; i < after.size(); ++i) {
    got.emplace(after[i]["prompt_len"].get<int>(), after[i]["output_len"].get<int>());
    BOOST_TEST(after[i]["model"] == "tiny");
  }
  BOOST_TEST((got == want));
}
