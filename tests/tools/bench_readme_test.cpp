// troupe bench serve against the README's own server (configs/local.toml, models/kjv with its
// 1,024-token context): the README's command as printed, prompts from real text in the server's
// tokens (a text file, a ShareGPT file), lengths that cannot fit refused, a run where nothing
// succeeds said plainly, and the /tokenize and /detokenize it learns the server through.
#define BOOST_TEST_MODULE bench_readme
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/http_client.h"

using namespace troupe;

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";

// The README's server: configs/local.toml and its model, models/kjv (a 1,024-token context).
test::serve_process readme_server() {
  return test::serve_process({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model",
                              std::string(TROUPE_SOURCE_DIR) + "/models/kjv"});
}

std::string bench_at(std::uint16_t port, const std::string& flags) {
  return troupe_bin + " bench serve --url http://127.0.0.1:" + std::to_string(port) + " " + flags + " 2>&1";
}

}  // namespace

// The README's own benchmark command against the README's server: it used to send 200 + 64
// random ids from a 32,000 vocabulary to a 4,096-token model with a 256-token context, and 0 of
// 64 succeeded. It now learns the context and vocabulary, and cuts real text to fit.
BOOST_AUTO_TEST_CASE(the_readme_benchmark_command_succeeds_against_the_readme_server) {
  auto serve = readme_server();
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string json = std::string(TROUPE_BINARY_DIR) + "/bench-readme.json";
  auto r = test::run_command(bench_at(serve.port(), "--requests 64 --concurrency 8 --json " + json));
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("Successful requests:                     64") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("context 1024") != std::string::npos, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(json));
  BOOST_TEST(j["completed"] == 64);
  BOOST_TEST(j["total_input_tokens"].get<int>() + j["total_output_tokens"].get<int>() <= 64 * 1024);
  // The chat form of the same command: prompts as the server decodes them, inside the template.
  r = test::run_command(bench_at(serve.port(), "--requests 16 --concurrency 8 --chat"));
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("Successful requests:                     16") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(prompts_come_from_a_text_file_or_a_sharegpt_file_in_the_servers_tokens) {
  auto serve = readme_server();
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string txt = std::string(TROUPE_BINARY_DIR) + "/bench-text.txt";
  std::ofstream(txt) << "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.\n";
  const std::string json = std::string(TROUPE_BINARY_DIR) + "/bench-text.json";
  auto r = test::run_command(bench_at(serve.port(), "--requests 6 --prompt-len 50 --output-len 4 --dataset-path " + txt + " --json " + json));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  BOOST_TEST(nlohmann::json::parse(std::ifstream(json))["total_input_tokens"] == 6 * 50);  // the short text wraps
  BOOST_TEST(r.output.find("prompts from " + txt) != std::string::npos, r.output);

  // ShareGPT: the first human turn is the prompt, the reply's length the output's.
  const std::string sg = std::string(TROUPE_BINARY_DIR) + "/bench-sharegpt.json";
  const nlohmann::json convs = nlohmann::json::array(
      {{{"conversations", {{{"from", "human"}, {"value", "Who smote the Philistines in the valley?"}},
                           {{"from", "gpt"}, {"value", "David, the son of Jesse, with a sling and a stone."}}}}},
       {{"conversations", {{{"from", "system"}, {"value", "be brief"}}}}},  // no human turn: skipped
       {{"conversations", {{{"from", "human"}, {"value", "And what said the king unto the people?"}},
                           {{"from", "gpt"}, {"value", "Go ye up, and the LORD shall be with you."}}}}}});
  std::ofstream(sg) << convs.dump();
  r = test::run_command(bench_at(serve.port(), "--requests 4 --dataset-path " + sg + " --no-ignore-eos --json " + json));
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(json));
  BOOST_TEST(j["completed"] == 4);
  const auto count = [&](const std::string& text) {
    return test::post_json(serve.port(), "/tokenize", {{"prompt", text}}).json()["count"].get<int>();  // with its BOS, as served
  };
  BOOST_TEST(j["total_input_tokens"] == 2 * count("Who smote the Philistines in the valley?") +
                                            2 * count("And what said the king unto the people?"));
  // A file that is not ShareGPT is named.
  std::ofstream(sg) << R"({"conversations": []})";
  r = test::run_command(bench_at(serve.port(), "--requests 4 --dataset-path " + sg));
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("expected a JSON array of conversations") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(lengths_that_cannot_fit_are_refused_and_a_run_where_nothing_succeeds_says_so) {
  auto serve = readme_server();
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto r = test::run_command(bench_at(serve.port(), "--requests 4 --prompt-len 1100 --output-len 10"));
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("do not fit the server's context of 1024 tokens") != std::string::npos, r.output);
  // Told a larger context than the server has, every request is refused: the bench says it
  // plainly, with the server's reason, and draws no plot.
  const std::string plot = std::string(TROUPE_BINARY_DIR) + "/bench-none";
  r = test::run_command(bench_at(serve.port(), "--requests 4 --prompt-len 1100 --output-len 10 --max-model-len 2000 --plot " + plot));
  BOOST_TEST(r.status == 1, r.output);
  BOOST_TEST(r.output.find("all of 4 requests failed; the server said:") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("4 x HTTP 413") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("no plot: no request succeeded") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("gnuplot") == std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(tokenize_and_detokenize_answer_as_vllms) {
  auto serve = readme_server();
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto t = test::post_json(serve.port(), "/tokenize", {{"prompt", "And God said"}});
  BOOST_TEST_REQUIRE(t.status == 200, t.body);
  const auto ids = t.json()["tokens"];
  BOOST_TEST(t.json()["count"] == ids.size());
  BOOST_TEST(t.json()["max_model_len"] == 1024);
  auto d = test::post_json(serve.port(), "/detokenize", {{"tokens", ids}});
  BOOST_TEST_REQUIRE(d.status == 200, d.body);
  BOOST_TEST(d.json()["prompt"] == "And God said");
  // A chat's messages are counted through the template, which adds tokens around the content.
  auto c = test::post_json(serve.port(), "/tokenize", {{"messages", {{{"role", "user"}, {"content", "And God said"}}}}});
  BOOST_TEST_REQUIRE(c.status == 200, c.body);
  BOOST_TEST(c.json()["count"].get<int>() > t.json()["count"].get<int>());
  // Errors name the field.
  auto bad = test::post_json(serve.port(), "/detokenize", {{"tokens", {5, 999999}}});
  BOOST_TEST(bad.status == 400);
  BOOST_TEST(bad.body.find("token 1 is 999999, outside the vocabulary") != std::string::npos, bad.body);
  bad = test::post_json(serve.port(), "/tokenize", {{"prompt", "x"}, {"truncate", 3}});
  BOOST_TEST(bad.status == 400);
  BOOST_TEST(bad.body.find("truncate: is not a field this endpoint supports") != std::string::npos, bad.body);
  BOOST_TEST(test::http_request(serve.port(), "GET", "/tokenize").status == 405);
}
