// troupe bench serve: its workload plans and statistics (pure), and a real run against
// `troupe serve` whose JSON report must account for every request and token.
#define BOOST_TEST_MODULE bench_serve
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/common/error.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tools/troupe/bench_serve/report.h"
#include "tools/troupe/bench_serve/workload.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(percentiles_interpolate_like_numpy) {
  const std::vector<double> v = {1, 2, 3, 4, 10};
  BOOST_TEST(bench::percentile(v, 50) == 3.0);
  BOOST_TEST(bench::percentile(v, 90) == 7.6, boost::test_tools::tolerance(1e-12));  // numpy.percentile: 7.6
  BOOST_TEST(bench::percentile(v, 99) == 9.76, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(bench::percentile({5}, 99) == 5.0);
}

BOOST_AUTO_TEST_CASE(summary_counts_tokens_latencies_and_goodput) {
  std::vector<bench::request_result> rs(3);
  for (int i = 0; i < 3; ++i) {
    rs[std::size_t(i)].ok = true;
    rs[std::size_t(i)].ttft = 0.1 * (i + 1);           // 100, 200, 300 ms
    rs[std::size_t(i)].e2e = rs[std::size_t(i)].ttft + 0.9;  // 9 more tokens, 100 ms each
    rs[std::size_t(i)].output_tokens = 10;
    rs[std::size_t(i)].prompt_tokens = 5;
    for (int k = 0; k < 10; ++k) rs[std::size_t(i)].chunk_times.push_back(rs[std::size_t(i)].ttft + 0.1 * k);
  }
  bench::request_result failed;
  failed.error = "HTTP 503";
  rs.push_back(failed);
  const auto s = bench::summarize(rs, 2.0, bench::parse_slo({"ttft:250", "tpot:150"}));
  BOOST_TEST(s.completed == 3);
  BOOST_TEST(s.failed == 1);
  BOOST_TEST(s.output_tokens == 30);
  BOOST_TEST(s.input_tokens == 15);
  BOOST_TEST(s.latency_ms.at("ttft").at("median") == 200.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.latency_ms.at("tpot").at("mean") == 100.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.latency_ms.at("itl").at("p99") == 100.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(*s.goodput == 1.0);  // two of three meet TTFT <= 250 ms, over 2 s
  BOOST_TEST(s.output_throughput == 15.0);
  BOOST_TEST(bench::to_json(s)["median_ttft_ms"].get<double>() == 200.0, boost::test_tools::tolerance(1e-9));
  BOOST_CHECK_THROW(bench::parse_slo({"latency:5"}), input_error);
}

BOOST_AUTO_TEST_CASE(workloads_follow_their_options) {
  bench::workload_options o;
  o.requests = 400;
  o.process = bench::arrival::poisson;
  o.rate = 50;
  o.prompt_len = 100;
  o.prompt_dist = bench::length_dist::uniform;
  o.output_dist = bench::length_dist::longtail;
  const auto plan = bench::plan_workload(o);
  BOOST_TEST(plan.size() == 400u);
  double mean_out = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    BOOST_TEST((plan[i].prompt_len >= 50 && plan[i].prompt_len <= 150));
    if (i) BOOST_TEST(plan[i].at >= plan[i - 1].at);
    mean_out += plan[i].output_len / 400.0;
  }
  BOOST_TEST(plan.back().at > 4.0);  // 400 arrivals at 50/s span about 8 s
  BOOST_TEST(plan.back().at < 12.0);
  BOOST_TEST(mean_out > 40.0);       // long-tailed around a mean of 64
  BOOST_TEST(mean_out < 100.0);
  BOOST_TEST(bench::plan_workload(o)[17].prompt_ids == plan[17].prompt_ids);  // deterministic

  bench::workload_options shared;
  shared.systems = 2;
  shared.users = 3;
  shared.prefix_len = 32;
  shared.requests = 6;
  shared.prompt_len = 8;
  const auto sp = bench::plan_workload(shared);
  for (int i = 0; i < 6; ++i) BOOST_TEST(sp[std::size_t(i)].prompt_len == 40);
  auto prefix = [&](int i) { return std::vector<std::int32_t>(sp[std::size_t(i)].prompt_ids.begin(), sp[std::size_t(i)].prompt_ids.begin() + 32); };
  BOOST_TEST((prefix(0) == prefix(2)));  // users 0..2 share system prompt 0
  BOOST_TEST((prefix(0) != prefix(3)));  // users 3..5 have system prompt 1
}

BOOST_AUTO_TEST_CASE(prompts_are_windows_of_real_text_and_fit_the_context) {
  const std::vector<std::int32_t> corpus = {10, 11, 12, 13, 14};
  const auto w = bench::corpus_window(corpus, 12, 3, 7);
  BOOST_TEST_REQUIRE(w.size() == 12u);
  for (std::size_t i = 1; i < w.size(); ++i) BOOST_TEST(w[i] == (w[i - 1] == 14 ? 10 : w[i - 1] + 1));  // consecutive, wrapping
  bench::workload_options o;
  o.requests = 3;
  o.prompt_len = 4;
  o.corpus = &corpus;
  for (const auto& r : bench::plan_workload(o))
    for (auto id : r.prompt_ids) BOOST_TEST((id >= 10 && id <= 14));

  std::vector<bench::planned_request> plan(3);
  plan[0].prompt_len = 100, plan[0].output_len = 20;  // fits 128 with 8 of overhead
  plan[1].prompt_len = 200, plan[1].output_len = 20;  // the prompt is cut to 100
  plan[1].prompt_ids.assign(200, 5);
  plan[2].prompt_len = 10, plan[2].output_len = 500;  // the output is cut to 110
  BOOST_TEST(bench::fit_to_context(plan, 128, 8) == 2);
  BOOST_TEST(plan[0].prompt_len == 100);
  BOOST_TEST(plan[1].prompt_len == 100);
  BOOST_TEST(plan[1].prompt_ids.size() == 100u);
  BOOST_TEST(plan[2].output_len == 110);
}

BOOST_AUTO_TEST_CASE(traces_are_replayed_and_bad_lines_named) {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/trace-test.jsonl";
  std::ofstream(path) << R"({"timestamp": 10.5, "prompt_len": 12, "output_len": 4, "tenant": "a"})" << "\n"
                      << R"({"timestamp": 10.0, "prompt": "hello there", "output_len": 2})" << "\n";
  const auto t = bench::read_trace(path, 32000, 1);
  BOOST_TEST_REQUIRE(t.size() == 2u);
  BOOST_TEST(t[0].at == 0.0);
  BOOST_TEST(t[0].prompt_text == "hello there");
  BOOST_TEST(t[1].at == 0.5);
  BOOST_TEST(t[1].prompt_ids.size() == 12u);
  BOOST_TEST(t[1].tenant == "a");
  std::ofstream(path) << R"({"timestamp": 1, "output_len": 4})" << "\n";
  try {
    bench::read_trace(path, 32000, 1);
    BOOST_FAIL("accepted a line without a prompt");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("trace-test.jsonl:1: prompt or prompt_len") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_run_against_troupe_serve_accounts_for_every_request_and_token) {
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-test";
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --url http://127.0.0.1:" +
                                   std::to_string(serve.port()) + " --requests 12 --concurrency 4 --prompt-len 40 " +
                                   "--output-len 6 --goodput 'ttft:60000' --quiet --json " + out + ".json --plot " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("Successful requests:                     12") != std::string::npos, r.output);
  std::ifstream in(out + ".json");
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["completed"] == 12);
  BOOST_TEST(j["failed"] == 0);
  BOOST_TEST(j["total_input_tokens"] == 12 * 40);
  BOOST_TEST(j["total_output_tokens"] == 12 * 6);
  BOOST_TEST(j["max_concurrency"] == 4);
  BOOST_TEST(j["request_goodput"].get<double>() == j["request_throughput"].get<double>());
  BOOST_TEST(j["median_ttft_ms"].get<double>() > 0.0);
  BOOST_TEST(j["p99_itl_ms"].get<double>() >= j["median_itl_ms"].get<double>());
  BOOST_TEST(j["server_frontend_cpu_us_per_token"].get<double>() > 0.0);
  BOOST_TEST(std::filesystem::file_size(out + "-latency.png") > 1000u);
  BOOST_TEST(std::filesystem::file_size(out + "-cdf.png") > 1000u);
}

// Against a disaggregated server, the KV transfer is a phase of its own: every request's KV
// was pulled once by the decode replica, and the report says how many and how long on average.
BOOST_AUTO_TEST_CASE(a_run_against_a_disaggregated_server_reports_the_kv_transfer_phase) {
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-disagg.json";
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --url http://127.0.0.1:" +
                                   std::to_string(serve.port()) + " --requests 6 --concurrency 3 --prompt-len 64 " +
                                   "--output-len 4 --quiet --json " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("Mean KV transfer time (server, ms):") != std::string::npos, r.output);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["completed"] == 6);
  BOOST_TEST(j["kv_transfers"].get<double>() == 6.0);
  BOOST_TEST(j["mean_kv_transfer_ms"].get<double>() > 0.0);
}

BOOST_AUTO_TEST_CASE(two_thousand_streams_are_open_at_once_on_the_sim_backend) {
  // 32 simulated replicas compute nothing, so only the frontend and the control plane are
  // exercised. Every stream has its first token before any stream ends: all 2,000 were open
  // at the server together. Each simulated step takes 100 ms, so a stream of 256 tokens lasts at
  // least 25.6 s while the whole run sends only 10 tokens per stream per second: opening all
  // streams takes a few seconds, not CPU time spent streaming (the frontend's one I/O thread both
  // accepts and streams). sim-32.toml's 200 us steps needed 2,560-token streams to outlast the
  // opening, 5.1 million events and over two minutes of a 2-core machine.
  const std::string config = std::string(TROUPE_BINARY_DIR) + "/sim-32-slow-steps.toml";
  {
    std::ofstream toml(config);
    toml << "[model]\npreset = \"1b\"\nbackend = \"sim\"\n"
            "[[nodes]]\nname = \"head\"\n"
            "[[pools]]\nname = \"decode\"\nrole = \"both\"\nreplicas = 32\nnodes = [\"head\"]\n"
            "[scheduler]\nmax_batched_tokens = 8192\nmax_seqs = 256\nblock_size = 16\nkv_memory = \"40GiB\"\n"
            "[router]\npolicy = \"least_loaded\"\n"
            "[sim]\nflops = 989e12\nbandwidth = \"3.35TB/s\"\nstep_overhead = \"100ms\"\n";
  }
  test::serve_process serve({config});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-2000.json";
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --url http://127.0.0.1:" +
                                   std::to_string(serve.port()) + " --requests 2000 --concurrency 2000 --prompt-len 32 " +
                                   "--output-len 256 --quiet --detailed --json " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["completed"] == 2000);
  BOOST_TEST(j["failed"] == 0);
  double last_first_token = 0, first_end = 1e9;
  for (std::size_t i = 0; i < 2000; ++i) {
    const double start = j["starts"][i].get<double>();
    last_first_token = std::max(last_first_token, start + j["ttfts"][i].get<double>());
    first_end = std::min(first_end, start + j["e2els"][i].get<double>());
    BOOST_TEST(j["output_lens"][i] == 256);
  }
  BOOST_TEST_MESSAGE("last first token at " << last_first_token << " s, first stream ended at " << first_end << " s");
  BOOST_TEST(last_first_token < first_end);
}

namespace {

const std::string troupe_bin = std::string(TROUPE_BINARY_DIR) + "/troupe";

// The README's server: configs/local.toml and its model, models/kjv (a 256-token context).
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
  BOOST_TEST(r.output.find("context 256") != std::string::npos, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(json));
  BOOST_TEST(j["completed"] == 64);
  BOOST_TEST(j["total_input_tokens"].get<int>() + j["total_output_tokens"].get<int>() <= 64 * 256);
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
  auto r = test::run_command(bench_at(serve.port(), "--requests 4 --prompt-len 300 --output-len 10"));
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("do not fit the server's context of 256 tokens") != std::string::npos, r.output);
  // Told a larger context than the server has, every request is refused: the bench says it
  // plainly, with the server's reason, and draws no plot.
  const std::string plot = std::string(TROUPE_BINARY_DIR) + "/bench-none";
  r = test::run_command(bench_at(serve.port(), "--requests 4 --prompt-len 300 --output-len 10 --max-model-len 1000 --plot " + plot));
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
  BOOST_TEST(t.json()["max_model_len"] == 256);
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
