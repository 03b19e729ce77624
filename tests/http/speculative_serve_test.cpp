// Speculative decoding through `troupe serve` (issue 25): 64 greedy and 64 seeded requests
// (temperature 0.8, top_p 0.95, penalties on some), 32 at a time, give exactly the text,
// tokens, logprobs and finish reasons of a server that does not speculate: with prefix hits and
// preemption (a KV pool too small for them), with a replica killed mid-run from the admin
// console (its requests migrate), disaggregated (the decode pool speculates), and with the
// target in tensor- and pipeline-parallel groups. The server's
// /metrics show that it did speculate, accept and reject, and that the counters balance.
#define BOOST_TEST_MODULE speculative_serve
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

const std::string dir = std::string(TROUPE_BINARY_DIR) + "/speculative-serve";

std::string config(const std::string& name, const std::string& pools, const std::string& kv_memory = "64MiB") {
  test::run_command("mkdir -p " + dir);
  const std::string file = dir + "/" + name + ".toml";
  std::ofstream t(file);
  t << "[model]\npath = \"" << test::synth_model("tiny-llama-f32", test::preset("tiny")) << "\"\n"
    << "[[nodes]]\nname = \"head\"\naddress = \"127.0.0.1:0\"\n"
    << pools << "[scheduler]\nmax_batched_tokens = 512\nchunk = 64\nkv_memory = \"" << kv_memory << "\"\n"
    << "[timeouts]\nrequest = \"120s\"\n";
  return file;
}

// Both proposers with k = 4 at every step (adaptive off: the test wants many proposals, accepted
// and rejected). The draft is the target quantized to q4_0 with `troupe model quantize`.
std::string speculative(const std::string& method) {
  if (method == "ngram") return "[pools.speculative]\nmethod = \"ngram\"\nk = 4\nngram_min = 1\nngram_max = 3\nadaptive = false\n";
  const std::string draft = dir + "/tiny-q4_0";
  static const bool made = [&] {
    test::run_command("rm -rf " + draft);
    const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe model quantize --type q4_0 --model " +
                                     test::synth_model("tiny-llama-f32", test::preset("tiny")) + " --out " + draft + " 2>&1");
    BOOST_TEST_REQUIRE(r.status == 0, r.output);
    return true;
  }();
  (void)made;
  return "[pools.speculative]\nmethod = \"draft\"\nk = 4\ndraft_model = \"" + draft + "\"\nadaptive = false\n";
}

// 64 greedy and 64 seeded requests; a third share a long opening (prefix hits), some quote
// their own words again (n-gram lookup finds them), some ask for logprobs, some carry penalties.
std::vector<json> bodies() {
  const std::vector<std::string> words = {"the", "king", "said", "unto", "them", "and", "it", "came", "to", "pass", "that",
                                          "in", "those", "days", "there", "was", "a", "man", "of", "land"};
  std::string shared;
  for (int i = 0; i < 60; ++i) shared += words[std::size_t(i * 7 % 20)] + " ";
  std::vector<json> out;
  for (int i = 0; i < 128; ++i) {
    std::string prompt = i % 3 == 0 ? shared : "";
    std::string own;
    for (int w = 0; w < 6 + i % 23; ++w) own += words[std::size_t((i * 13 + w * 5) % 20)] + " ";
    prompt += own;
    if (i % 4 == 1) prompt += own;  // says it again
    json b{{"prompt", prompt}, {"max_tokens", 16 + i % 17}, {"ignore_eos", true}};
    if (i >= 64) b["temperature"] = 0.8, b["top_p"] = 0.95, b["seed"] = i;
    else b["temperature"] = 0;
    if (i % 5 == 2) b["repetition_penalty"] = 1.2, b["frequency_penalty"] = 0.3;
    if (i % 3 == 1) b["logprobs"] = 2;
    out.push_back(b);
  }
  return out;
}

struct answer {
  std::string text, finish;
  json logprobs;
  int tokens = 0;
};

// Sends every body, `concurrency` at a time; `midway` runs once half of them are answered.
// Sends every body, `concurrency` at a time. With `midway`: once half are answered it runs on
// a thread of its own (a kill from the admin console), and until it returns the clients go on
// sending bodies again from the first, into `again` (index, answer). So requests are in flight
// on every replica when the kill lands, however slow the machine or fast the server: the
// console's process starting up took longer than the rest of the run once (a busy machine).
std::vector<answer> send_all(std::uint16_t port, const std::vector<json>& bs, int concurrency = 32,
                             const std::function<void()>& midway = {},
                             std::vector<std::pair<std::size_t, answer>>* again = nullptr) {
  std::vector<answer> out(bs.size());
  std::atomic<std::size_t> next{0}, done{0};
  std::atomic<bool> failed{false}, midway_done{!midway};
  std::once_flag once;
  std::thread midway_thread;
  std::mutex m;
  std::vector<std::string> errors;
  std::vector<std::thread> ts;
  for (int c = 0; c < concurrency; ++c)
    ts.emplace_back([&] {
      for (std::size_t n; !failed;) {
        n = next++;
        if (n >= bs.size() && midway_done) break;
        const std::size_t i = n % bs.size();
        const auto r = test::post_json(port, "/v1/completions", bs[i]);
        if (r.status != 200) {
          std::lock_guard<std::mutex> l(m);
          errors.push_back("request " + std::to_string(i) + ": " + std::to_string(r.status) + " " + r.body);
          failed = true;
          continue;
        }
        const json j = json::parse(r.body);
        const json& c0 = j["choices"][0];
        answer a{c0["text"], c0["finish_reason"], c0.value("logprobs", json()), j["usage"]["completion_tokens"]};
        if (n < bs.size()) {
          out[i] = std::move(a);
        } else {
          std::lock_guard<std::mutex> l(m);
          if (again) again->emplace_back(i, std::move(a));
        }
        if (++done == bs.size() / 2 && midway)
          std::call_once(once, [&] { midway_thread = std::thread([&] { midway(), midway_done = true; }); });
      }
    });
  for (auto& t : ts) t.join();
  if (midway_thread.joinable()) midway_thread.join();
  for (const auto& e : errors) BOOST_ERROR(e);
  BOOST_TEST_REQUIRE(!failed);
  return out;
}


// The counters of every replica are in /metrics once each has reported a load after its last
// step; the frontend asks on each scrape, so poll until two scrapes agree.
std::map<std::string, double> settled_metrics(std::uint16_t port) {
  const std::vector<std::string> names = {"troupe:spec_decode_num_drafts_total", "troupe:spec_decode_num_draft_tokens_total",
                                          "troupe:spec_decode_num_accepted_tokens_total", "troupe:spec_decode_num_accepted_tokens_per_pos_total",
                                          "troupe:generation_tokens_total", "troupe:num_preemptions_total", "troupe:prefix_cache_hits_total",
                                          "troupe:num_migrations_total", "troupe:replica_engine_steps_total",
                                          "troupe:replica_forward_seconds_total", "troupe:spec_decode_propose_seconds_total"};
  std::map<std::string, double> last;
  for (int i = 0; i < 200; ++i) {
    std::map<std::string, double> now;
    for (const auto& n : names) now[n] = test::metric_sum(port, n);
    if (now == last) return now;
    last = std::move(now);
  }
  return last;
}

void expect_same(const std::vector<answer>& off, const std::vector<answer>& on, const std::string& what) {
  for (std::size_t i = 0; i < off.size(); ++i) {
    BOOST_TEST(on[i].text == off[i].text, what << ": text of request " << i << ": [" << on[i].text << "] vs [" << off[i].text << "]");
    BOOST_TEST(on[i].tokens == off[i].tokens, what << ": tokens of request " << i);
    BOOST_TEST(on[i].finish == off[i].finish, what << ": finish reason of request " << i);
    BOOST_TEST(on[i].logprobs == off[i].logprobs, what << ": logprobs of request " << i);
  }
}

void expect_speculated(const std::map<std::string, double>& m, const std::string& what) {
  const double drafts = m.at("troupe:spec_decode_num_drafts_total"), proposed = m.at("troupe:spec_decode_num_draft_tokens_total"),
               accepted = m.at("troupe:spec_decode_num_accepted_tokens_total");
  BOOST_TEST_MESSAGE(what << ": " << drafts << " drafts, " << proposed << " tokens proposed, " << accepted << " accepted");
  BOOST_TEST(drafts > 0, what);
  BOOST_TEST(accepted > 0, what);
  BOOST_TEST(accepted < proposed, what << ": nothing was rejected");
  BOOST_TEST(m.at("troupe:spec_decode_num_accepted_tokens_per_pos_total") == accepted, what);
  // The step costs a benchmark predicts speedups from: steps run, seconds in the forward and proposing.
  BOOST_TEST(m.at("troupe:replica_engine_steps_total") > 0, what);
  BOOST_TEST(m.at("troupe:replica_forward_seconds_total") > 0, what);
  BOOST_TEST(m.at("troupe:spec_decode_propose_seconds_total") > 0, what);
}

const std::vector<answer>& plain() {
  static const std::vector<answer> out = [] {
    test::serve_process serve({config("off", "[[pools]]\nname = \"main\"\nreplicas = 1\n", "256MiB")});
    BOOST_TEST_REQUIRE(serve.port() != 0);
    return send_all(serve.port(), bodies());
  }();
  return out;
}

}  // namespace

namespace {

void with_prefix_hits_preemption_and_a_replica_killed(const std::string& method) {
  const auto& off = plain();
  // 256 KiB of the tiny model's KV is 32 blocks of 16 tokens: 32 requests at a time preempt.
  const std::uint16_t admin = test::free_port_pair();  // the endpoint, and its events at + 1
  test::serve_process serve({config(method, "[[pools]]\nname = \"main\"\nreplicas = 2\n" + speculative(method), "256KiB"), "--admin-port",
                             std::to_string(admin)});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  std::string killed;
  std::vector<std::pair<std::size_t, answer>> again;
  const auto on = send_all(
      serve.port(), bodies(), 32,
      [&] {
        // Slowed first (each step waits 100 ms), main-1 holds requests when the kill lands: the
        // tiny model's answers otherwise take a few milliseconds, and on a busy machine main-1
        // was once between two of them when it died, so nothing moved.
        const std::string console = std::string(TROUPE_BINARY_DIR) + "/troupe admin --timeout 20 --endpoint tcp://127.0.0.1:" +
                                    std::to_string(admin) + " --events tcp://127.0.0.1:" + std::to_string(admin + 1);
        killed = test::run_command(console + " slow main-1 100 2>&1").output + "; ";
        killed += test::run_command(console + " kill main-1 2>&1").output;
      },
      &again);
  BOOST_TEST_MESSAGE("admin kill: " << killed << "; " << again.size() << " requests sent again while it ran");
  expect_same(off, on, method);
  for (const auto& [i, a] : again) {  // sent again around the kill: the same answers too
    BOOST_TEST(a.text == off[i].text, method << ": text of request " << i << " sent again");
    BOOST_TEST(a.tokens == off[i].tokens, method << ": tokens of request " << i << " sent again");
    BOOST_TEST(a.logprobs == off[i].logprobs, method << ": logprobs of request " << i << " sent again");
  }
  const auto m = settled_metrics(serve.port());
  expect_speculated(m, method);
  BOOST_TEST(m.at("troupe:num_preemptions_total") > 0);
  BOOST_TEST(m.at("troupe:prefix_cache_hits_total") > 0);
  BOOST_TEST(m.at("troupe:num_migrations_total") > 0, "killing main-1 moved no request: " << killed);
}

void disaggregated(const std::string& method) {
  const auto& off = plain();
  test::serve_process serve({config("disagg-" + method, "[[pools]]\nname = \"prefill\"\nrole = \"prefill\"\nreplicas = 1\n"
                                                        "[[pools]]\nname = \"decode\"\nrole = \"decode\"\nreplicas = 1\n" +
                                                            speculative(method))});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto on = send_all(serve.port(), bodies());
  expect_same(off, on, "disaggregated " + method);
  expect_speculated(settled_metrics(serve.port()), "disaggregated " + method);
}

}  // namespace

BOOST_AUTO_TEST_CASE(ngram_with_prefix_hits_preemption_and_a_replica_killed_changes_no_output) {
  with_prefix_hits_preemption_and_a_replica_killed("ngram");
}
BOOST_AUTO_TEST_CASE(draft_with_prefix_hits_preemption_and_a_replica_killed_changes_no_output) {
  with_prefix_hits_preemption_and_a_replica_killed("draft");
}
BOOST_AUTO_TEST_CASE(disaggregated_the_decode_pool_speculates_with_ngram_and_changes_no_output) { disaggregated("ngram"); }
BOOST_AUTO_TEST_CASE(disaggregated_the_decode_pool_speculates_with_a_draft_and_changes_no_output) { disaggregated("draft"); }

// The target runs in a worker group (its ranks beside the scheduler that drafts and verifies).
// Tensor parallelism sums partial products in another order than one rank does, so its logprobs
// are compared with the same group not speculating.
BOOST_AUTO_TEST_CASE(in_tensor_and_pipeline_parallel_groups_speculation_changes_no_output) {
  for (const auto& [method, group] : std::vector<std::pair<std::string, std::string>>{{"draft", "tensor_parallel = 2\n"},
                                                                                       {"ngram", "pipeline_parallel = 2\n"}}) {
    std::vector<answer> off;
    {
      test::serve_process plain_group({config("group-off", "[[pools]]\nname = \"main\"\nreplicas = 1\n" + group)});
      BOOST_TEST_REQUIRE(plain_group.port() != 0);
      off = send_all(plain_group.port(), bodies());
    }
    test::serve_process serve({config("group-" + method, "[[pools]]\nname = \"main\"\nreplicas = 1\n" + group + speculative(method))});
    BOOST_TEST_REQUIRE(serve.port() != 0);
    const auto on = send_all(serve.port(), bodies());
    expect_same(off, on, method + " with " + group);
    expect_speculated(settled_metrics(serve.port()), method + " with " + group);
  }
}

BOOST_AUTO_TEST_CASE(a_malformed_speculative_table_is_refused_naming_the_key) {
  const auto run = [](const std::string& spec) {
    return test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe serve " +
                             config("bad", "[[pools]]\nname = \"main\"\nreplicas = 1\n[pools.speculative]\n" + spec) +
                             " --port 0 --registry-port 0 2>&1");
  };
  auto r = run("method = \"ngram\"\nk = 0\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("pools.speculative.k") != std::string::npos, r.output);
  r = run("method = \"medusa\"\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("pools.speculative.method") != std::string::npos, r.output);
  r = run("method = \"draft\"\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("pools.speculative.draft_model") != std::string::npos, r.output);
  r = run("method = \"ngram\"\nngram_min = 4\nngram_max = 2\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("pools.speculative.ngram_min") != std::string::npos, r.output);
  r = run("method = \"draft\"\ndraft_model = \"" + test::synth_model("small-llama-f32", test::preset("small")) + "\"\n");
  BOOST_TEST(r.status != 0);  // 32,000 tokens against the tiny model's 512
  BOOST_TEST(r.output.find("small-llama-f32") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("tiny-llama-f32") != std::string::npos, r.output);
  r = run("method = \"draft\"\ndraft_model = \"" + dir + "/no-such-draft\"\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("no-such-draft") != std::string::npos, r.output);
  r = run("method = \"ngram\"\nlookahead = 3\n");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("pools.speculative.lookahead") != std::string::npos, r.output);
}
