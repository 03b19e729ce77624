// The troupe command as a user runs it: the main job through the runtime gives the engine's
// tokens, and bad input ends with a clear error and a non-zero exit, never a crash.
#define BOOST_TEST_MODULE cli
#include <boost/test/unit_test.hpp>

#include "runtime/admin/admin_message.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "runtime/common/machine.h"
#include "runtime/engine/engine.h"
#include "runtime/eval/perplexity.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/support/models.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

using namespace troupe;

namespace {

struct run_result {
  int status = -1;
  std::string out;  // stdout and stderr
};

run_result troupe_cmd(const std::string& args) {
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe " + args + " 2>&1");
  return {r.status, r.output};
}

// The same, run in folder `dir`.
run_result run_in(const std::string& dir, const std::string& args) {
  const auto r = test::run_command("cd '" + dir + "' && " + std::string(TROUPE_BINARY_DIR) + "/troupe " + args + " 2>&1");
  return {r.status, r.output};
}

}  // namespace

namespace {

// `troupe generate --config CONFIG --model DIR` on a greedy prompt gives the engine's tokens
// for the model in DIR, run whole in this process; returns the command's JSON.
nlohmann::json check_generate(const std::string& config, const std::string& dir, std::vector<std::int32_t> prompt, int max_tokens) {
  std::string ids;
  for (auto t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  run_result r = troupe_cmd("generate --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/" + config + " --model " + dir +
                            " --prompt-ids " + ids + " --max-tokens " + std::to_string(max_tokens) + " --ignore-eos --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.out);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  auto e = engine::cpu_engine(std::shared_ptr<const model::llama_model>(model::llama_model::load(dir)), nullptr, {});
  engine::request req{"0", std::move(prompt), {}, {}, 0};
  req.params.temperature = 0;
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  const auto expected = engine::generate_all(e, {req})[0];
  BOOST_TEST(j["outputs"][0]["output_ids"].get<std::vector<std::int32_t>>() == expected, boost::test_tools::per_element());
  return j;
}

}  // namespace

BOOST_AUTO_TEST_CASE(generate_with_the_default_topology_gives_the_engines_tokens) {
  const auto j = check_generate("local.toml", test::synth_model("small-llama-f32", test::preset("small")), {5, 17, 300, 4000}, 12);
  BOOST_TEST(j["outputs"][0]["finish_reason"].get<std::string>() == "length");
}

// configs/tp2.toml: the same model on a tensor-parallel group of two ranks gives the same tokens.
BOOST_AUTO_TEST_CASE(generate_with_the_tensor_parallel_topology_gives_the_engines_tokens) {
  check_generate("tp2.toml", test::synth_model("small-llama-f32", test::preset("small")), {5, 17, 300, 4000}, 12);
}

// configs/ep2.toml: a mixture-of-experts model on an expert-parallel group of two ranks gives the
// tokens the whole model gives in one engine.
BOOST_AUTO_TEST_CASE(generate_with_the_expert_parallel_topology_gives_the_engines_tokens) {
  check_generate("ep2.toml", test::synth_model("moe-mixtral-f32", test::preset("moe", "mixtral")), {5, 17, 300, 1000, 77, 9}, 16);
}

BOOST_AUTO_TEST_CASE(bad_input_is_an_error_naming_what_was_wrong) {
  auto expect = [](const std::string& args, const std::string& needle) {
    run_result r = troupe_cmd(args);
    BOOST_TEST(r.status == 1, args << " -> " << r.out);
    BOOST_TEST(r.out.find(needle) != std::string::npos, args << " -> " << r.out);
  };
  expect("model synth --preset huge --out /tmp/x", "unknown --preset 'huge'");
  expect("generate --model /nonexistent/model --prompt hi", "/nonexistent/model/config.json: cannot open");
  expect("generate --config /nonexistent.toml", "/nonexistent.toml: cannot open");
  expect("generate --max-tokens many", "--max-tokens expects an integer");
  expect("generate --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/sim-32.toml", "needs the distributed runtime");
  expect("bench engine", "--model DIR is required");
  expect("model quantize --type int8 --out /tmp/troupe-cli-x.gguf", "--type int8 has no GGUF type");
  expect("model quantize --type q4_k_s --out /tmp/troupe-cli-x", "unknown --type 'q4_k_s' (q8_0, q4_0, int8, or a mix");
  expect("model quantize --type q4_k_s --out /tmp/troupe-cli-x.gguf", "unknown quantization mix 'q4_k_s'");
  expect("model quantize --type q4_k_m --out /tmp/troupe-cli-x.gguf --model " + test::synth_model("moe-qwen2-moe-f32", test::preset("moe", "qwen2_moe")),
         "dense layers among the experts' (mlp_only_layers, decoder_sparse_step)");
  // A console with nothing to talk to said nothing for its whole 30 s request timeout.
  expect("admin status --endpoint tcp://127.0.0.1:" + std::to_string(test::free_port()), "no admin endpoint at tcp://127.0.0.1:");
  const std::string three = std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml";
  expect("node " + three + " --name nobody", "no node named \"nobody\"");
  const std::string tiny = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
  expect("node " + three + " --name node-a --head 127.0.0.1:1 --model " + tiny, "no cluster token: set TROUPE_CLUSTER_TOKEN");
  ::setenv("TROUPE_CLUSTER_TOKEN", "a-token-of-sixteen-or-more", 1);
  expect("node " + three + " --name node-a --head 127.0.0.1:1 --model " + tiny, "cannot reach the head at 127.0.0.1:1");
  ::unsetenv("TROUPE_CLUSTER_TOKEN");
  run_result r = troupe_cmd("frobnicate");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find("unknown command 'frobnicate'") != std::string::npos);
}

// kv_memory = "100GB" on a smaller machine was accepted and RSS climbed until the machine ran
// out; "900TB" killed the replica and left the process answering 503, deaf to SIGTERM. Both are
// refused at start with the figures, and the process ends (timeout turns a hang into 124).
BOOST_AUTO_TEST_CASE(kv_memory_beyond_the_machine_is_refused_at_start) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  for (const char* size : {"100000GB", "900TB"}) {
    const std::string path = std::string(TROUPE_BINARY_DIR) + "/kv-too-big.toml";
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fprintf(f, "[model]\npath = \"%s\"\n[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
                    "[[pools]]\nname = \"main\"\nreplicas = 1\nnodes = [\"head\"]\n[scheduler]\nkv_memory = \"%s\"\n",
                 dir.c_str(), size);
    std::fclose(f);
    const auto c = test::run_command("timeout 120 " + std::string(TROUPE_BINARY_DIR) + "/troupe serve " + path +
                                     " --port 0 --registry-port 0 2>&1");
    const run_result r{c.status, c.output};
    BOOST_TEST(r.status == 1, r.out);
    BOOST_TEST(r.out.find("kv-too-big.toml:11: scheduler.kv_memory:") != std::string::npos, r.out);
    BOOST_TEST(r.out.find("this machine has") != std::string::npos, r.out);
  }
}

// Two node processes of 11 GiB of KV each started on a 23.5 GiB host: each was checked alone.
// launch starts every process of the topology on this host, so it checks their sum.
BOOST_AUTO_TEST_CASE(launch_refuses_processes_whose_kv_together_exceeds_the_host) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  const auto each_mib = (long long)(double(machine_memory_bytes()) * 0.6 / (1 << 20));  // each fits, the two do not
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/kv-host-sum.toml";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fprintf(f, "[model]\npath = \"%s\"\n[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:%u\"\n[[nodes]]\nname = \"a\"\n"
                  "[[nodes]]\nname = \"b\"\n[[pools]]\nname = \"main\"\nreplicas = 2\nnodes = [\"a\", \"b\"]\n"
                  "[scheduler]\nkv_memory = \"%lldMiB\"\n",
               dir.c_str(), unsigned(test::free_port()), each_mib);
  std::fclose(f);
  const auto c = test::run_command("timeout 120 " + std::string(TROUPE_BINARY_DIR) + "/troupe launch " + path + " 2>&1");
  BOOST_TEST(c.status == 1, c.output);
  BOOST_TEST(c.output.find("scheduler.kv_memory:") != std::string::npos, c.output);
  BOOST_TEST(c.output.find("this host (every process of the topology)") != std::string::npos, c.output);
}

// `--help` on a subcommand said "unknown option"; `generate -h` synthesized a model and ran;
// `bench runtime -h` ran the benchmark. Every command answers -h/--help with its usage, exit 0,
// and nothing else happens (no model written, nothing served).
BOOST_AUTO_TEST_CASE(every_command_answers_help_with_its_usage_and_does_nothing_else) {
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/help-must-not-write";
  std::filesystem::remove_all(out);
  // Every command troupe --help lists (bench collectives and model quantize were missing), and the groups.
  run_result top = troupe_cmd("--help");
  BOOST_TEST_REQUIRE(top.status == 0, top.out);
  std::vector<std::string> commands{"model", "bench", "eval"};
  const std::size_t list = top.out.find("\ncommands:\n");
  BOOST_TEST_REQUIRE(list != std::string::npos, top.out);
  for (std::size_t at = list + 11; at < top.out.size() && top.out.compare(at, 2, "  ") == 0;) {
    const std::size_t end = top.out.find('\n', at);
    const std::string line = top.out.substr(at + 2, end - at - 2);
    commands.push_back(line.substr(0, line.find("  ")));
    at = end + 1;
  }
  for (const char* c : {"serve", "node", "launch", "admin", "admin keygen", "generate", "model synth", "model quantize", "bench engine",
                        "bench runtime", "bench serve", "bench kv-transfer", "bench autoscale", "bench collectives", "bench sim", "deploy kubernetes", "plan", "eval perplexity", "info"})
    BOOST_TEST((std::find(commands.begin(), commands.end(), c) != commands.end()), c << " not listed in " << top.out);
  for (const std::string& cmd : commands) {
    for (const char* flag : {"--help", "-h"}) {
      run_result r = troupe_cmd(cmd + " " + flag + " --out " + out + " --model " + out);
      BOOST_TEST(r.status == 0, cmd << " " << flag << " -> " << r.out);
      BOOST_TEST(r.out.rfind("usage: troupe " + cmd, 0) == 0, cmd << " " << flag << " -> " << r.out);
    }
  }
  BOOST_TEST(!std::filesystem::exists(out));
  // Flags the hand-written usage texts left out: help is now written from the flags themselves.
  BOOST_TEST(troupe_cmd("serve --help").out.find("--tls-certificate FILE") != std::string::npos);
  BOOST_TEST(troupe_cmd("bench collectives --help").out.find("--no-gloo") != std::string::npos);
  // troupe admin --help lists every command the server answers (from the list `help` sends).
  run_result admin_help = troupe_cmd("admin --help");
  for (const auto& [name, what] : admin::server_commands())
    BOOST_TEST(admin_help.out.find("  " + name) != std::string::npos, name << " not in " << admin_help.out);
  run_result v = troupe_cmd("--version");
  BOOST_TEST(v.status == 0);
  BOOST_TEST(v.out.rfind("troupe 0.", 0) == 0, v.out);
  run_result bad = troupe_cmd("generate -x");
  BOOST_TEST(bad.status == 1);
  BOOST_TEST(bad.out.find("unknown option -x") != std::string::npos, bad.out);
  run_result port = troupe_cmd("serve --port 99999");
  BOOST_TEST(port.status == 1);
  BOOST_TEST(port.out.find("--port: 99999 is not a port") != std::string::npos, port.out);
}

// bench runtime's report is its output: the cluster's line per request (request_end) used to
// come with it, 10,000 of them by default. They are there again when asked for.
BOOST_AUTO_TEST_CASE(bench_runtime_reports_without_a_log_line_per_request_unless_asked) {
  run_result quiet = troupe_cmd("bench runtime --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/sim-32.toml --requests 40 --max-tokens 2");
  BOOST_TEST_REQUIRE(quiet.status == 0, quiet.out);
  BOOST_TEST(quiet.out.find("placed: 40 requests") != std::string::npos, quiet.out);
  BOOST_TEST(quiet.out.find("request_end") == std::string::npos, quiet.out);
  BOOST_TEST(quiet.out.find("replica_started") == std::string::npos, quiet.out);
  run_result verbose = troupe_cmd("bench runtime --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/sim-32.toml --requests 40 --max-tokens 2 --log-level info");
  BOOST_TEST_REQUIRE(verbose.status == 0, verbose.out);
  std::size_t lines = 0;
  for (std::size_t at = verbose.out.find("request_end"); at != std::string::npos; at = verbose.out.find("request_end", at + 1))
    ++lines;
  BOOST_TEST(lines == 40u, verbose.out);
}

// The simulator's profile as a user makes it: troupe bench engine fits one to the steps it
// timed, troupe bench kv-transfer adds the handoff's cost, and troupe bench sim and troupe plan
// run on it; a profile that is not one is refused by name.
BOOST_AUTO_TEST_CASE(bench_engine_fits_a_step_profile_that_bench_sim_and_plan_run_on) {
  const std::string profile = std::string(TROUPE_BINARY_DIR) + "/cli-step-profile.json";
  std::filesystem::remove(profile);
  run_result fit = troupe_cmd("bench engine --model " + std::string(TROUPE_SOURCE_DIR) +
                              "/models/kjv --batches 1,8 --steps 2 --prompt 128 --context 64 --fit-profile " + profile);
  BOOST_TEST_REQUIRE(fit.status == 0, fit.out);
  BOOST_TEST(fit.out.find("step profile: ") != std::string::npos, fit.out);
  const auto written = nlohmann::json::parse(std::ifstream(profile));
  BOOST_TEST(written["samples"].get<int>() == 5);  // prefills of 128, 32 and 64 tokens, and two decode batches
  BOOST_TEST(written["step"]["base_s"].get<double>() + written["step"]["per_token_s"].get<double>() > 0);
  run_result sim = troupe_cmd("bench sim --replicas 1,4 --requests 300 --json --profile " + profile);
  BOOST_TEST_REQUIRE(sim.status == 0, sim.out);
  const auto rows = nlohmann::json::parse(sim.out.substr(sim.out.find('{')))["rows"];
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  for (const auto& row : rows) {
    BOOST_TEST(row["requests"].get<int>() == 300);
    BOOST_TEST(row["ttft_p50_s"].get<double>() > 0);
  }
  // The KV transfer's fit joins it, and troupe plan sizes a cluster for a trace in Azure's format
  // with it: the topology it writes is one troupe deploy kubernetes turns into manifests.
  run_result kv = troupe_cmd("bench kv-transfer --sizes 1,16 --reps 3 --fit-profile " + profile);
  BOOST_TEST_REQUIRE(kv.status == 0, kv.out);
  const auto with_transfer = nlohmann::json::parse(std::ifstream(profile));
  BOOST_TEST(with_transfer["transfer"]["per_byte_s"].get<double>() > 0);
  BOOST_TEST(with_transfer["kv_bytes_per_token"].get<double>() > 0);
  const std::string trace = std::string(TROUPE_BINARY_DIR) + "/cli-plan-trace.csv", topo = std::string(TROUPE_BINARY_DIR) + "/cli-plan.toml";
  {
    std::ofstream t(trace);
    t << "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    for (int i = 0; i < 200; ++i)  // 40 short requests a second for 5 s: a loaded machine's profile serves them
      t << "2024-05-10 00:00:0" << i / 40 << "." << std::setw(7) << std::setfill('0') << (i % 40) * 250000 << "," << 16 + (i * 37) % 48 << ","
        << 4 + (i * 13) % 12 << "\n";
  }
  std::filesystem::remove(topo);
  run_result plan = troupe_cmd("plan --trace " + trace + " --slo ttft_p99=10s,itl_p99=1s --max-replicas 4 --chunks 512 --budgets 2048 "
                               "--json --profile " + profile + " -o " + topo);
  BOOST_TEST_REQUIRE(plan.status == 0, plan.out);
  const auto planned = nlohmann::json::parse(plan.out.substr(plan.out.find('{')));
  BOOST_TEST(planned["requests"].get<int>() == 200);
  BOOST_TEST(planned["best"]["meets"].get<bool>());
  BOOST_TEST_REQUIRE(std::filesystem::exists(topo));
  run_result deploy = troupe_cmd("deploy kubernetes " + topo + " -o " + std::string(TROUPE_BINARY_DIR) + "/cli-plan-k8s");
  BOOST_TEST(deploy.status == 0, deploy.out);
  // Without -o nothing is written where the command runs (it wrote plan.toml there): the
  // topology comes back in the answer.
  const std::string cwd = std::string(TROUPE_BINARY_DIR) + "/cli-plan-cwd";
  std::filesystem::remove_all(cwd);
  std::filesystem::create_directories(cwd);
  const run_result printed = run_in(cwd, "plan --trace " + trace + " --slo ttft_p99=10s,itl_p99=1s --max-replicas 4 --chunks 512 --budgets 2048 "
                                          "--json --profile " + profile);
  BOOST_TEST_REQUIRE(printed.status == 0, printed.out);
  BOOST_TEST(std::filesystem::is_empty(cwd));
  const auto answer = nlohmann::json::parse(printed.out.substr(printed.out.find('{')));
  BOOST_TEST(answer["topology_file"].is_null());
  BOOST_TEST(answer["topology"].get<std::string>().find("[[pools]]") != std::string::npos);
  run_result unmet = troupe_cmd("plan --trace " + trace + " --slo ttft_p99=1us --max-replicas 2 --profile " + profile + " -o " + topo + ".none");
  BOOST_TEST(unmet.status == 1, unmet.out);
  BOOST_TEST(unmet.out.find("no topology of at most 2 replicas meets the SLO") != std::string::npos, unmet.out);
  BOOST_TEST(!std::filesystem::exists(topo + ".none"));
  run_result mixed = troupe_cmd("plan --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml --chunks 512 --trace " + trace +
                                " --slo ttft_p99=1s --profile " + profile);
  BOOST_TEST(mixed.status == 1, mixed.out);
  BOOST_TEST(mixed.out.find("--chunks: a search setting") != std::string::npos, mixed.out);
  std::ofstream(profile) << "{\"step\": {\"base_s\": -1}}";
  run_result bad = troupe_cmd("bench sim --replicas 1 --requests 10 --profile " + profile);
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(bad.out.find(profile + ": step.base_s") != std::string::npos, bad.out);
  bad = troupe_cmd("bench sim --replicas 0");
  BOOST_TEST(bad.status != 0);
  BOOST_TEST(bad.out.find("--replicas") != std::string::npos, bad.out);
}

// The simulator against the real cluster on one trace (tools/bench/sim_accuracy.sh is the
// benchmark, its error table in docs/performance.md): for one replica (configs/local.toml), two
// with kv_aware routing, and one prefill + one decode replica (configs/disagg.toml), `troupe plan
// --config` on a profile measured here predicts the TTFT and TPOT medians troupe bench serve
// measures within a factor of 3, and goodput within 25%: bounds a machine busy with other tests
// keeps (the benchmark's errors are below 35% at the median).
BOOST_AUTO_TEST_CASE(the_simulator_predicts_the_real_cluster_on_the_same_trace) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/sim-accuracy", model = std::string(TROUPE_SOURCE_DIR) + "/models/kjv";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string profile = dir + "/profile.json";
  run_result r = troupe_cmd("bench engine --model " + model + " --batches 1,4,16 --steps 4 --prompt 256 --fit-profile " + profile);
  BOOST_TEST_REQUIRE(r.status == 0, r.out);
  r = troupe_cmd("bench kv-transfer --sizes 1,4 --reps 3 --backend inproc --fit-profile " + profile);
  BOOST_TEST_REQUIRE(r.status == 0, r.out);
  {
    test::serve_process calibrate({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
    BOOST_TEST_REQUIRE(calibrate.port() != 0);
    r = troupe_cmd("bench serve --url http://127.0.0.1:" + std::to_string(calibrate.port()) + " --concurrency 1 --requests 4 "
                   "--prompt-len 128 --output-len 32 --output-dist uniform --quiet --fit-profile " + profile);
    BOOST_TEST_REQUIRE(r.status == 0, r.out);
    BOOST_TEST(r.out.find("every answer had") == std::string::npos, r.out);  // several lengths: the stream's cost told apart
  }
  const double step_s = nlohmann::json::parse(std::ifstream(profile))["serving"]["step_s"].get<double>();
  {  // against a disaggregated server: what a handoff adds beyond the KV copy, the serving fit kept
    test::serve_process calibrate({std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml", "--model", model});
    BOOST_TEST_REQUIRE(calibrate.port() != 0);
    r = troupe_cmd("bench serve --url http://127.0.0.1:" + std::to_string(calibrate.port()) + " --concurrency 1 --requests 4 "
                   "--prompt-len 128 --output-len 32 --quiet --fit-profile " + profile);
    BOOST_TEST_REQUIRE(r.status == 0, r.out);
    BOOST_TEST(r.out.find("handoff: ") != std::string::npos, r.out);
    BOOST_TEST(nlohmann::json::parse(std::ifstream(profile))["serving"]["step_s"].get<double>() == step_s);
  }
  const auto handoff = nlohmann::json::parse(std::ifstream(profile))["serving"].value("handoff_s", 0.0);
  {  // the aggregated fit again: its own figures anew, the handoff's kept
    test::serve_process calibrate({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
    BOOST_TEST_REQUIRE(calibrate.port() != 0);
    r = troupe_cmd("bench serve --url http://127.0.0.1:" + std::to_string(calibrate.port()) + " --concurrency 1 --requests 4 "
                   "--prompt-len 128 --output-len 32 --quiet --fit-profile " + profile);
    BOOST_TEST_REQUIRE(r.status == 0, r.out);
    BOOST_TEST(nlohmann::json::parse(std::ifstream(profile))["serving"].value("handoff_s", 0.0) == handoff);
    // One answer length: the stream's cost is not told apart, and the command says so.
    BOOST_TEST(r.out.find("every answer had 32 tokens") != std::string::npos, r.out);
  }
  {  // 20 requests at 5 a second, the same in bench serve's JSONL and the simulator's CSV
    std::ofstream jsonl(dir + "/trace.jsonl"), csv(dir + "/trace.csv");
    csv << "seconds,prompt_tokens,max_tokens\n";
    for (int i = 0; i < 20; ++i) {
      const double at = 0.2 * i + 0.05 * ((i * 7) % 3);
      const int prompt = 64 + (i * 53) % 192, output = 16 + (i * 11) % 32;
      jsonl << nlohmann::json{{"timestamp", at}, {"prompt_len", prompt}, {"output_len", output}}.dump() << "\n";
      csv << at << "," << prompt << "," << output << "\n";
    }
  }
  std::string two = dir + "/kv-aware.toml";
  {
    std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find("replicas = 1"), 12, "replicas = 2");
    text.replace(text.find("policy = \"least_loaded\""), 23, "policy = \"kv_aware\"");
    std::ofstream(two) << text;
  }
  for (const std::string& topology : {std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", two, std::string(TROUPE_SOURCE_DIR) + "/configs/disagg.toml"}) {
    const std::string real = dir + "/real.json";
    {
      test::serve_process serve({topology, "--model", model});
      BOOST_TEST_REQUIRE(serve.port() != 0);
      r = troupe_cmd("bench serve --url http://127.0.0.1:" + std::to_string(serve.port()) + " --trace " + dir +
                     "/trace.jsonl --goodput 'ttft:2000 tpot:200' --quiet --json " + real);
      BOOST_TEST_REQUIRE(r.status == 0, r.out);
    }
    r = troupe_cmd("plan --config " + topology + " --model " + model + " --trace " + dir + "/trace.csv --slo ttft_p99=2s,itl_p99=200ms --json --profile " + profile);
    BOOST_TEST_REQUIRE(r.status == 0, r.out);
    const auto measured = nlohmann::json::parse(std::ifstream(real));
    const auto predicted = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    const std::pair<double, double> pairs[] = {{predicted["ttft_s"]["p50"].get<double>() * 1e3, measured["p50_ttft_ms"].get<double>()},
                                               {predicted["itl_s"]["p50"].get<double>() * 1e3, measured["p50_tpot_ms"].get<double>()}};
    for (const auto& [sim, got] : pairs) BOOST_TEST((sim > got / 3 && sim < got * 3), topology << ": simulated " << sim << " ms, measured " << got << " ms");
    const double good = measured["request_goodput"].get<double>(), sim_good = predicted["goodput"].get<double>();
    BOOST_TEST(std::abs(sim_good - good) < 0.25 * good, topology << ": goodput simulated " << sim_good << ", measured " << good);
  }
}

// troupe eval perplexity scores a text with the model's tokenizer and gives the library's figure
// for the same tokens; a missing or unreadable text is an error naming it.
BOOST_AUTO_TEST_CASE(eval_perplexity_gives_the_librarys_figure_and_refuses_bad_input) {
  const std::string dir = test::synth_model("small-llama-f32", test::preset("small"));
  const std::string text = std::string(TROUPE_BINARY_DIR) + "/eval-text.txt";
  {
    std::FILE* f = std::fopen(text.c_str(), "w");
    BOOST_TEST_REQUIRE(f != nullptr);
    std::fputs("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
               "and darkness was upon the face of the deep.\n", f);
    std::fclose(f);
  }
  run_result r = troupe_cmd("eval perplexity --model " + dir + " --text " + text + " --window 24 --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.out);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  auto model = model::llama_model::load(dir);
  auto tok = tokenizer::tokenizer::load(dir + "/tokenizer.json");
  std::FILE* f = std::fopen(text.c_str(), "r");
  char buf[4096];
  const std::size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  const auto ids = tok->encode(std::string(buf, n), true);
  const auto expected = eval::perplexity(*model, ids, {24, 256});
  BOOST_TEST(j["tokens"].get<std::size_t>() == expected.tokens);
  BOOST_TEST(j["window"].get<int>() == 24);
  BOOST_TEST(j["perplexity"].get<double>() == expected.perplexity(), boost::test_tools::tolerance(1e-9));
  BOOST_TEST(j["perplexity"].get<double>() > 1.0);

  run_result none = troupe_cmd("eval perplexity --model " + dir);
  BOOST_TEST(none.status == 1);
  BOOST_TEST(none.out.find("--text FILE is required") != std::string::npos, none.out);
  run_result missing = troupe_cmd("eval perplexity --model " + dir + " --text /nonexistent/text.txt");
  BOOST_TEST(missing.status == 1);
  BOOST_TEST(missing.out.find("--text: cannot read /nonexistent/text.txt") != std::string::npos, missing.out);
  run_result wide = troupe_cmd("eval perplexity --model " + dir + " --text " + text + " --window 100000000");
  BOOST_TEST(wide.status == 1);
  BOOST_TEST(wide.out.find("beyond the model's context") != std::string::npos, wide.out);
  // A group named without its command lists its commands (as troupe alone does), exit 2.
  run_result which = troupe_cmd("eval");
  BOOST_TEST(which.status == 2);
  BOOST_TEST(which.out.find("  perplexity ") != std::string::npos, which.out);
}

// vLLM's habits: `troupe serve models/kjv` was a TOML error; --served-model-name, --max-model-len
// and --api-key work as vLLM users type them; a second --model, a context past the model's
// positions and an unauthenticated API off loopback are refused by name.
BOOST_AUTO_TEST_CASE(serve_takes_a_model_folder_and_vllms_flags) {
  const std::string kjv = std::string(TROUPE_SOURCE_DIR) + "/models/kjv";
  {
    test::serve_process serve({kjv, "--served-model-name", "bible,kjv-alias", "--max-model-len", "128", "--api-key", "k3y"});
    BOOST_TEST_REQUIRE(serve.port() != 0);
    const auto models = test::http_request(serve.port(), "GET", "/v1/models", "", {{"Authorization", "Bearer k3y"}});
    BOOST_TEST_REQUIRE(models.status == 200, models.body);
    BOOST_TEST(models.json()["data"][0]["id"] == "bible");
    BOOST_TEST(models.json()["data"][0]["max_model_len"] == 128);
    BOOST_TEST(models.json()["data"][1]["id"] == "kjv-alias");  // an alias: listed, and requests may name it
    BOOST_TEST(models.json()["data"][1]["root"] == "bible");
    const auto aliased = test::http_request(serve.port(), "POST", "/v1/completions",
                                            R"({"model": "kjv-alias", "prompt": "And God said", "max_tokens": 2})",
                                            {{"Authorization", "Bearer k3y"}});
    BOOST_TEST(aliased.status == 200, aliased.body);
    BOOST_TEST(aliased.json()["model"] == "bible");
    BOOST_TEST(test::http_request(serve.port(), "GET", "/v1/models/kjv-alias", "", {{"Authorization", "Bearer k3y"}}).status == 200);
    BOOST_TEST(test::http_request(serve.port(), "GET", "/v1/models/other", "", {{"Authorization", "Bearer k3y"}}).status == 404);
    BOOST_TEST(test::http_request(serve.port(), "GET", "/v1/models").status == 401);
    const auto done = test::http_request(serve.port(), "POST", "/v1/completions",
                                         R"({"model": "bible", "prompt": "And God said", "max_tokens": 4})",
                                         {{"Authorization", "Bearer k3y"}});
    BOOST_TEST(done.status == 200, done.body);
  }
  auto expect = [](const std::string& args, const std::string& needle) {
    const auto c = test::run_command("timeout 120 " + std::string(TROUPE_BINARY_DIR) + "/troupe " + args + " 2>&1");
    BOOST_TEST(c.status == 1, args << " -> " << c.output);
    BOOST_TEST(c.output.find(needle) != std::string::npos, args << " -> " << c.output);
  };
  expect("serve --model " + kjv + " --model " + kjv + " --port 0 --registry-port 0", "--model is given twice");
  expect("serve " + kjv + " --model " + kjv + " --port 0 --registry-port 0", "the model is given twice");
  expect("serve " + kjv + " --max-model-len 4096 --port 0 --registry-port 0", "max_model_len 4096 is beyond the model's 1024 positions");
  expect("serve " + kjv + " --host 0.0.0.0 --port 0 --registry-port 0", "--api-key KEY");
  expect("serve " + kjv + " --host 0.0.0.0 --port 0 --registry-port 0", "--allow-unauthenticated");
  expect("serve /nonexistent/folder --port 0", "/nonexistent/folder: not a topology (*.toml), a model folder or a .gguf file");
}
