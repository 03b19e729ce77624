// The log of `troupe serve --log-format json --log-level debug`: a request ends with one line naming it (its
// client's X-Request-Id as the trace, returned in the response header too), its replica, its
// tokens, its phase times and its outcome, and the replica's own lines about it carry the same
// trace; an X-Request-Id a client could forge lines with is replaced by the request's id.
#define BOOST_TEST_MODULE request_log
#include <boost/test/unit_test.hpp>

#include <fstream>
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
