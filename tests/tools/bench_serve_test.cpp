// troupe bench serve: its workload plans and statistics (pure), and a real run against
// `troupe serve` whose JSON report must account for every request and token.
#define BOOST_TEST_MODULE bench_serve
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "runtime/common/error.h"
#include "runtime/metrics/metrics.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"
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

BOOST_AUTO_TEST_CASE(a_canary_is_reported_beside_its_baseline) {
  bench::summary canary, baseline;
  canary.completed = 9, canary.failed = 1, canary.refused = 1;
  baseline.completed = 10;
  canary.latency_ms["ttft"] = {{"p50", 30.0}, {"p99", 90.0}};
  baseline.latency_ms["ttft"] = {{"p50", 20.0}, {"p99", 60.0}};
  canary.request_throughput = 4, baseline.request_throughput = 5;
  std::map<std::string, nlohmann::json> rows;
  for (const auto& r : bench::versus_json(canary, baseline)) rows[r["metric"].get<std::string>()] = r;
  BOOST_TEST(rows.at("ttft_p50_ms")["ratio"].get<double>() == 1.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(rows.at("ttft_p99_ms")["canary"].get<double>() == 90.0);
  BOOST_TEST(rows.at("request_throughput")["ratio"].get<double>() == 0.8, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(rows.at("failed_share")["canary"].get<double>() == 0.1, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(rows.at("failed_share")["ratio"].is_null());  // the baseline failed none
  BOOST_TEST(rows.at("itl_p99_ms")["ratio"].is_null());    // no figures: no ratio
  const std::string text = bench::versus_text(canary, baseline, "kjv-canary", "kjv");
  BOOST_TEST(text.find("kjv-canary against kjv") != std::string::npos, text);
  BOOST_TEST(text.find("1.50x") != std::string::npos, text);
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
  // A recorded trace replayed against a canary, then against the baseline (here the same served
  // model under another name in the request: its own), reported side by side.
  const std::string served = nlohmann::json::parse(test::http_request(serve.port(), "GET", "/v1/models").body)["data"][0]["id"];
  std::ofstream(out + "-trace.jsonl") << R"({"timestamp": 1.0, "prompt_len": 20, "output_len": 3, "model": "elsewhere"})" << "\n"
                                      << R"({"timestamp": 1.1, "prompt_len": 30, "output_len": 4, "outcome": "stop"})" << "\n";
  const auto v = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --url http://127.0.0.1:" + std::to_string(serve.port()) +
                                   " --trace " + out + "-trace.jsonl --model " + served + " --baseline " + served + " --quiet --json " + out +
                                   "-vs.json 2>&1");
  BOOST_TEST_REQUIRE(v.status == 0, v.output);
  BOOST_TEST(v.output.find(served + " against " + served) != std::string::npos, v.output);
  std::ifstream vs_in(out + "-vs.json");
  const auto vs = nlohmann::json::parse(vs_in);
  BOOST_TEST(vs["completed"] == 2);
  BOOST_TEST(vs["baseline"]["completed"] == 2);
  BOOST_TEST(vs["baseline"]["total_output_tokens"] == 7);
  BOOST_TEST(vs["versus_baseline"].size() == 12u);
}

// A load generator for any OpenAI-compatible server: against llama.cpp's server it stopped
// with "the server does not tokenize (/tokenize answered without a count)", since that server
// takes {"content"} and answers {"tokens": [...]}. Both forms are read now; the peer speaks
// llama.cpp's (tests/tools/llama_server_peer.py).
BOOST_AUTO_TEST_CASE(a_server_that_tokenizes_as_llama_cpp_does_is_benchmarked) {
  test::child_process peer({"/usr/bin/python3", std::string(TROUPE_SOURCE_DIR) + "/tests/tools/llama_server_peer.py"});
  std::string line;
  BOOST_TEST_REQUIRE(peer.wait_for_line("listening on", &line));
  const std::string port = std::to_string(std::stoi(line.substr(line.rfind(' ') + 1)));
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-llama-cpp.json";
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe bench serve --url http://127.0.0.1:" + port +
                                   " --requests 6 --concurrency 2 --prompt-len 24 --output-len 5 --quiet --json " + out + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["completed"] == 6);
  BOOST_TEST(j["total_input_tokens"] == 6 * 24);  // prompts of the planned length, by the server's own tokens
  BOOST_TEST(j["total_output_tokens"] == 6 * 5);
}

// A background load that runs for exactly as long as something else takes: SIGINT stops the
// sending, the requests in flight finish, and the report covers the ones sent, none failed.
BOOST_AUTO_TEST_CASE(a_signal_stops_sending_and_the_report_covers_what_was_sent) {
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-signal.json";
  std::filesystem::remove(out);
  test::child_process bench({std::string(TROUPE_BINARY_DIR) + "/troupe", "bench", "serve", "--url",
                             "http://127.0.0.1:" + std::to_string(serve.port()), "--requests", "100000", "--concurrency", "2",
                             "--prompt-len", "16", "--output-len", "4", "--quiet", "--json", out});
  BOOST_TEST_REQUIRE(bench.started());
  auto finished = [&] {
    const auto text = test::http_request(serve.port(), "GET", "/metrics").body;
    return metrics::sum_samples(text, "troupe:request_success_total").value_or(0);
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (finished() < 4 && std::chrono::steady_clock::now() < deadline) {
  }
  BOOST_TEST_REQUIRE(finished() >= 4);
  bench.kill(SIGINT);
  const int status = bench.reap();
  BOOST_TEST_REQUIRE(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["stopped_by_signal"] == true);
  BOOST_TEST(j["planned_requests"] == 100000);
  BOOST_TEST(j["failed"] == 0);
  BOOST_TEST(j["completed"].get<int>() >= 4);
  BOOST_TEST(j["completed"].get<int>() < 100000);
  // Every request sent was answered in full: the server finished exactly the ones reported.
  BOOST_TEST(j["total_output_tokens"].get<int>() == 4 * j["completed"].get<int>());
  const auto settled = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (finished() != j["completed"].get<double>() && std::chrono::steady_clock::now() < settled) {
  }
  BOOST_TEST(finished() == j["completed"].get<double>());
}

// A stop that comes while the plan is still being made counts too, even in a process that
// started with SIGINT ignored (every background job of a script does): it sends nothing and
// reports that. Before, the signal was lost and the whole plan was sent.
BOOST_AUTO_TEST_CASE(a_signal_while_planning_stops_before_anything_is_sent) {
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/bench-serve-early-signal.json";
  std::filesystem::remove(out);
  const auto before = std::signal(SIGINT, SIG_IGN);  // the child inherits it, as a script's `&` gives it
  test::child_process bench({std::string(TROUPE_BINARY_DIR) + "/troupe", "bench", "serve", "--url",
                             "http://127.0.0.1:" + std::to_string(serve.port()), "--requests", "1000000", "--rate", "10",
                             "--prompt-len", "16", "--output-len", "4", "--quiet", "--json", out});
  std::signal(SIGINT, before);
  BOOST_TEST_REQUIRE(bench.started());
  auto resident_mb = [&] {  // a million planned requests take hundreds of MB: it is planning
    std::ifstream statm("/proc/" + std::to_string(bench.pid()) + "/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return double(resident) * double(::sysconf(_SC_PAGESIZE)) / 1e6;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (resident_mb() < 100 && std::chrono::steady_clock::now() < deadline) {
  }
  BOOST_TEST_REQUIRE(resident_mb() >= 100);
  bench.kill(SIGINT);
  const auto status = bench.reap_within(std::chrono::seconds(60));
  BOOST_TEST_REQUIRE(status.has_value(), "the stop was lost: bench serve went on sending");
  BOOST_TEST_REQUIRE(WIFEXITED(*status));
  BOOST_TEST(WEXITSTATUS(*status) == 0);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  BOOST_TEST(j["stopped_by_signal"] == true);
  BOOST_TEST(j["planned_requests"] == 1000000);
  BOOST_TEST(j["completed"] == 0);
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

