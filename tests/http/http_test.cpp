// The OpenAI frontend over real HTTP: `troupe serve` runs as a child process on loopback and
// the tests talk to it with a plain HTTP client. Greedy outputs equal the engine's own, usage
// counts are right, each error status comes with its message, a client that disconnects frees
// its KV blocks, /metrics counts what the test did, and promtool accepts /metrics. A Mistral-format
// model's strict tool calls open with its special marker.
#define BOOST_TEST_MODULE http
#include <boost/test/unit_test.hpp>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <boost/asio.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/engine.h"
#include "runtime/metrics/metrics.h"
#include "tests/support/engine_factory.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

std::string model_dir() { return test::synth_model("small-llama-f32", test::preset("small")); }
std::string local_toml() { return std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml"; }

std::shared_ptr<const tokenizer::tokenizer> tok() {
  static std::shared_ptr<const tokenizer::tokenizer> t = tokenizer::tokenizer::load(model_dir() + "/tokenizer.json");
  return t;
}

// What the engine alone generates (greedy) for a prompt, as text.
std::string engine_text(const std::vector<std::int32_t>& prompt, int max_tokens) {
  auto e = engine::cpu_engine(test::small_model(), tok(), test::engine_cfg(512, 2048));
  engine::request r;
  r.id = "x";
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return tok()->decode(engine::generate_all(e, {r})[0]);
}

// A topology file in the build tree: configs/local.toml plus `extra` TOML.
std::string topology_with(const std::string& name, const std::string& extra) {
  std::ifstream in(local_toml());
  std::stringstream ss;
  ss << in.rdbuf() << "\n" << extra << "\n";
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/" + name + ".toml";
  std::ofstream(path) << ss.str();
  return path;
}

struct server_fixture {
  server_fixture() : serve({local_toml(), "--model", model_dir()}) {}
  test::serve_process serve;
};

// A sum over every series of a metric whose labels contain `match` (e.g. finished_reason="length").
double metric_sum(const std::string& text, const std::string& name, const std::string& match = "") {
  return metrics::sum_samples(text, name, match).value_or(0);
}

double aborts(const std::string& metrics) {
  return metric_sum(metrics, "troupe:request_success_total", "finished_reason=\"abort\"");
}

// After a client left: its request's abort is counted, and no KV or running request is left.
// The abort count and the replica's KV and running figures reach /metrics by different messages
// (the request's final update; the replica's next load report), in either order under load: wait
// for all three (bounded: the tests' requests would take far longer than this to finish).
void expect_one_more_abort_and_nothing_held(std::uint16_t port, double aborted_before) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto settled = [&](const std::string& m) {
    return aborts(m) != aborted_before && metric_sum(m, "troupe:kv_cache_usage_perc") == 0.0 &&
           metric_sum(m, "troupe:num_requests_running") == 0.0;
  };
  std::string metrics = test::http_request(port, "GET", "/metrics").body;
  while (!settled(metrics) && std::chrono::steady_clock::now() < deadline)
    metrics = test::http_request(port, "GET", "/metrics").body;
  BOOST_TEST(aborts(metrics) == aborted_before + 1);
  BOOST_TEST(metric_sum(metrics, "troupe:kv_cache_usage_perc") == 0.0);
  BOOST_TEST(metric_sum(metrics, "troupe:num_requests_running") == 0.0);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(one_server, server_fixture)

BOOST_AUTO_TEST_CASE(completions_give_the_engines_greedy_text_with_right_usage) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string prompt = "The actor model of computation";
  const auto ids = tok()->encode(prompt, true);
  const std::string expected = engine_text(ids, 12);
  json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = test::post_json(serve.port(), "/v1/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  json j = r.json();
  BOOST_TEST(j["object"] == "text_completion");
  BOOST_TEST(j["choices"][0]["text"].get<std::string>() == expected);
  BOOST_TEST(j["choices"][0]["finish_reason"] == "length");
  BOOST_TEST(j["usage"]["prompt_tokens"] == int(ids.size()));
  BOOST_TEST(j["usage"]["completion_tokens"] == 12);
  BOOST_TEST(j["usage"]["total_tokens"] == int(ids.size()) + 12);

  // The same prompt as token ids, and streamed: the deltas join to the same text.
  body["prompt"] = ids;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  r = test::post_json(serve.port(), "/v1/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  BOOST_TEST(r.headers["content-type"] == "text/event-stream");
  const auto ev = r.events();
  BOOST_TEST_REQUIRE(ev.size() >= 3u);
  BOOST_TEST(ev.back() == "[DONE]");
  std::string joined;
  for (std::size_t i = 0; i + 2 < ev.size(); ++i) joined += json::parse(ev[i])["choices"][0]["text"].get<std::string>();
  BOOST_TEST(joined == expected);
  BOOST_TEST(json::parse(ev[ev.size() - 3])["choices"][0]["finish_reason"] == "length");
  const json usage = json::parse(ev[ev.size() - 2]);
  BOOST_TEST(usage["choices"].empty());
  BOOST_TEST(usage["usage"]["completion_tokens"] == 12);
  BOOST_TEST(usage["usage"]["prompt_tokens"] == int(ids.size()));
}

BOOST_AUTO_TEST_CASE(chat_renders_the_models_template_streaming_and_not) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const json messages = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                     {{"role", "user"}, {"content", "Name three actors. ✨"}}});
  auto tmpl = chat::chat_template::load(model_dir());
  BOOST_TEST_REQUIRE(tmpl.has_value());
  const auto ids = tok()->encode(tmpl->render(messages, true), false);
  const std::string expected = engine_text(ids, 10);
  json body = {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = test::post_json(serve.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  json j = r.json();
  BOOST_TEST(j["object"] == "chat.completion");
  BOOST_TEST(j["choices"][0]["message"]["role"] == "assistant");
  BOOST_TEST(j["choices"][0]["message"]["content"].get<std::string>() == expected);
  BOOST_TEST(j["usage"]["prompt_tokens"] == int(ids.size()));
  BOOST_TEST(j["usage"]["completion_tokens"] == 10);

  body["stream"] = true;
  r = test::post_json(serve.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const auto ev = r.events();
  BOOST_TEST_REQUIRE(ev.size() >= 3u);
  BOOST_TEST(json::parse(ev[0])["choices"][0]["delta"]["role"] == "assistant");
  BOOST_TEST(ev.back() == "[DONE]");
  std::string joined;
  for (std::size_t i = 0; i + 1 < ev.size(); ++i) {
    const json c = json::parse(ev[i]);
    BOOST_TEST(c["object"] == "chat.completion.chunk");
    if (c["choices"][0]["delta"].contains("content")) joined += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  BOOST_TEST(joined == expected);
  BOOST_TEST(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"] == "length");
}

BOOST_AUTO_TEST_CASE(logprobs_are_the_models_and_sum_to_at_most_zero) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto r = test::post_json(serve.port(), "/v1/completions",
                           {{"prompt", "hello"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}, {"ignore_eos", true}});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const json lp = r.json()["choices"][0]["logprobs"];
  BOOST_TEST_REQUIRE(lp["tokens"].size() == 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const double chosen = lp["token_logprobs"][i].get<double>();
    BOOST_TEST(chosen <= 0.0);
    BOOST_TEST(lp["top_logprobs"][i].size() <= 3u);
    double best = -1e30;
    for (auto& [t, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    BOOST_TEST(chosen == best, "greedy picks the most likely token");  // same float either way
  }
}

// echo with logprobs and vLLM's prompt_logprobs score the prompt teacher-forced: the same
// figure `troupe eval perplexity` gives for the same text, streamed and not.
BOOST_AUTO_TEST_CASE(prompt_logprobs_equal_eval_perplexitys_teacher_forced_values) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const std::string text = "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
                           "and God divided the light from the darkness.";
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/prompt_logprobs_text.txt";
  std::ofstream(path) << text;
  const auto eval = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe eval perplexity --json --model " + model_dir() +
                                      " --text " + path);
  BOOST_TEST_REQUIRE(eval.status == 0, eval.output);
  const json ref = json::parse(eval.output);
  const std::size_t n = ref["tokens"].get<std::size_t>();

  auto r = test::post_json(serve.port(), "/v1/completions",
                           {{"prompt", text}, {"max_tokens", 1}, {"temperature", 0}, {"echo", true}, {"logprobs", 0}});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const json choice = r.json()["choices"][0];
  BOOST_TEST(choice["text"].get<std::string>().rfind(text, 0) == 0u, "echo puts the prompt first");
  const json& lps = choice["logprobs"]["token_logprobs"];
  BOOST_TEST_REQUIRE(lps.size() == n + 2);  // the prompt's n + 1 tokens (the first unscored), then the output's
  BOOST_TEST(lps[0].is_null());
  double nll = 0;
  for (std::size_t k = 1; k <= n; ++k) nll -= lps[k].get<double>();
  BOOST_TEST(nll / double(n) == ref["mean_nll"].get<double>(), boost::test_tools::tolerance(1e-4));

  // vLLM's spelling, streamed: the prompt's chunk comes first with the same values.
  r = test::post_json(serve.port(), "/v1/completions",
                      {{"prompt", text}, {"max_tokens", 2}, {"temperature", 0}, {"prompt_logprobs", 2}, {"stream", true}});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const json first = json::parse(r.events().at(0))["choices"][0];
  const json& pl = first["prompt_logprobs"];
  BOOST_TEST_REQUIRE(pl.size() == n + 1);
  BOOST_TEST(pl[0].is_null());
  const auto ids = tok()->encode(text, true);
  for (std::size_t k = 1; k <= n; ++k) {
    const json& at = pl[k][std::to_string(ids[k])];
    BOOST_TEST(at["logprob"].get<double>() == lps[k].get<double>(), boost::test_tools::tolerance(1e-5));
    BOOST_TEST(at["rank"].get<int>() >= 1);
    BOOST_TEST(pl[k].size() <= 3u);  // the token and the top 2
  }
}

// n seeded choices: reproducible, choice j equal to a single request with seed + j, for every
// prompt of a batch; best_of keeps the n whose tokens are most likely.
BOOST_AUTO_TEST_CASE(n_choices_and_batches_of_prompts_equal_single_requests_with_their_seeds) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const json prompts = {"The actor model", "Messages between"};
  auto text_of = [&](const json& body) {
    auto r = test::post_json(serve.port(), "/v1/completions", body);
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    return r.json();
  };
  const json base = {{"max_tokens", 6}, {"temperature", 0.9}, {"seed", 40}, {"ignore_eos", true}};
  json many = base;
  many["prompt"] = prompts;
  many["n"] = 3;
  const json got = text_of(many);
  BOOST_TEST_REQUIRE(got["choices"].size() == 6u);
  BOOST_TEST(got["usage"]["completion_tokens"] == 36);
  BOOST_TEST(text_of(many)["choices"] == got["choices"]);  // reproducible
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      json one = base;
      one["prompt"] = prompts[std::size_t(i)];
      one["seed"] = 40 + j;
      const json& c = got["choices"][std::size_t(i * 3 + j)];
      BOOST_TEST(c["index"] == i * 3 + j);
      BOOST_TEST(c["text"] == text_of(one)["choices"][0]["text"], "prompt " << i << " choice " << j);
    }
  // best_of 4, n 2: the two draws with the highest summed logprob, as their single requests say.
  json best = base;
  best["prompt"] = prompts[0];
  best["best_of"] = 4;
  best["n"] = 2;
  std::vector<std::pair<double, std::string>> draws;
  for (int j = 0; j < 4; ++j) {
    json one = base;
    one["prompt"] = prompts[0];
    one["seed"] = 40 + j;
    one["logprobs"] = 0;
    const json c = text_of(one)["choices"][0];
    double sum = 0;
    for (const auto& lp : c["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    draws.emplace_back(sum, c["text"].get<std::string>());
  }
  std::stable_sort(draws.begin(), draws.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const json kept = text_of(best);
  BOOST_TEST_REQUIRE(kept["choices"].size() == 2u);
  BOOST_TEST(kept["choices"][0]["text"] == draws[0].second);
  BOOST_TEST(kept["choices"][1]["text"] == draws[1].second);
  BOOST_TEST(kept["choices"][0]["logprobs"].is_null());  // ranked by logprobs it did not ask for
  BOOST_TEST(kept["usage"]["completion_tokens"] == 24);
}

BOOST_AUTO_TEST_CASE(errors_come_in_openais_shape_with_the_field_named) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto r = test::http_request(serve.port(), "POST", "/v1/completions", "{not json");
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["message"].get<std::string>().find("not valid JSON") != std::string::npos, r.body);

  r = test::post_json(serve.port(), "/v1/completions", {{"prompt", "x"}, {"temperature", "hot"}});
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["param"] == "temperature");
  BOOST_TEST(r.json()["error"]["type"] == "invalid_request_error");
  BOOST_TEST(r.json()["error"]["message"].get<std::string>() == "temperature: expected a number, got a string");

  r = test::post_json(serve.port(), "/v1/chat/completions", {{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}});
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["param"] == "messages[0].role");

  r = test::post_json(serve.port(), "/v1/completions", {{"prompt", json::array({1, 2, 99999999})}});
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["message"].get<std::string>().find("outside the vocabulary") != std::string::npos, r.body);

  r = test::post_json(serve.port(), "/v1/completions", {{"prompt", "x"}, {"model", "gpt-9"}});
  BOOST_TEST(r.status == 404);
  BOOST_TEST(r.json()["error"]["param"] == "model");

  r = test::http_request(serve.port(), "GET", "/v2/nothing");
  BOOST_TEST(r.status == 404);
  BOOST_TEST(r.json()["error"]["message"].get<std::string>() == "no route GET /v2/nothing");

  r = test::post_json(serve.port(), "/v1/completions", {{"prompt", std::vector<int>(5000, 7)}});
  BOOST_TEST(r.status == 413);
  BOOST_TEST(r.json()["error"]["message"].get<std::string>().find("the prompt has 5000 tokens") != std::string::npos, r.body);

  r = test::post_json(serve.port(), "/v1/completions", {{"prompt", "x"}, {"max_tokens", 5000}});
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["param"] == "max_tokens");

  r = test::http_request(serve.port(), "POST", "/v1/completions", std::string(5 << 20, 'x'));
  BOOST_TEST(r.status == 413);
  BOOST_TEST(r.body.find("larger than") != std::string::npos, r.body);

  // A generative model's folder has no pooling: /v1/embeddings names the model.
  r = test::post_json(serve.port(), "/v1/embeddings", {{"input", "x"}});
  BOOST_TEST(r.status == 400);
  BOOST_TEST(r.json()["error"]["param"] == "model");
  BOOST_TEST(r.json()["error"]["message"].get<std::string>().find("computes no embeddings") != std::string::npos, r.body);
}

BOOST_AUTO_TEST_CASE(models_and_health) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  auto r = test::http_request(serve.port(), "GET", "/v1/models");
  BOOST_TEST(r.status == 200);
  BOOST_TEST(r.json()["data"][0]["id"] == "small-llama-f32");
  BOOST_TEST(r.json()["data"][0]["max_model_len"] == 4096);
  r = test::http_request(serve.port(), "GET", "/health");
  BOOST_TEST(r.status == 200);
  BOOST_TEST(r.json()["replicas_live"] == 1);
}

BOOST_AUTO_TEST_CASE(a_client_that_disconnects_frees_its_kv_blocks) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket sock(ioc);
  sock.connect({asio::ip::make_address("127.0.0.1"), serve.port()});
  const std::string body = json{{"prompt", std::vector<int>(300, 11)}, {"max_tokens", 3000}, {"stream", true}, {"ignore_eos", true}}.dump();
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  asio::write(sock, asio::buffer(req));
  // Read until the first token arrived: the request holds KV blocks now.
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) got.append(buf, sock.read_some(asio::buffer(buf)));
  auto metrics = test::http_request(serve.port(), "GET", "/metrics").body;
  BOOST_TEST(metric_sum(metrics, "troupe:kv_cache_usage_perc") > 0.0);
  const double aborted_before = aborts(metrics);
  sock.close();
  expect_one_more_abort_and_nothing_held(serve.port(), aborted_before);
}

// Non-streaming, nothing is written until the answer is complete, so a client that hung up was
// noticed only then: its request ran to the end holding its KV. A half-closed client (one that
// shut down its sending side) still gets its answer.
BOOST_AUTO_TEST_CASE(a_non_streaming_client_that_hangs_up_has_its_request_aborted_and_its_kv_freed) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  namespace asio = boost::asio;
  auto connect_and_send = [&](asio::io_context& ioc, int max_tokens) {
    auto sock = std::make_unique<asio::ip::tcp::socket>(ioc);
    sock->connect({asio::ip::make_address("127.0.0.1"), serve.port()});
    const std::string body = json{{"prompt", std::vector<int>(300, 11)}, {"max_tokens", max_tokens}, {"ignore_eos", true}}.dump();
    asio::write(*sock, asio::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    return sock;
  };
  asio::io_context ioc;
  auto metrics = test::http_request(serve.port(), "GET", "/metrics").body;
  const double aborted_before = aborts(metrics);
  {
    auto sock = connect_and_send(ioc, 3000);
    // Hang up once the request holds KV blocks.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (metric_sum(metrics, "troupe:kv_cache_usage_perc") == 0.0 && std::chrono::steady_clock::now() < deadline)
      metrics = test::http_request(serve.port(), "GET", "/metrics").body;
    BOOST_TEST_REQUIRE(metric_sum(metrics, "troupe:kv_cache_usage_perc") > 0.0);
    sock->close();
  }
  expect_one_more_abort_and_nothing_held(serve.port(), aborted_before);

  // Half-closed: the whole answer, after the interim 100 Continue if it took over a second.
  auto sock = connect_and_send(ioc, 400);
  sock->shutdown(asio::ip::tcp::socket::shutdown_send);
  std::string got;
  char buf[8192];
  boost::system::error_code ec;
  for (std::size_t n; (n = sock->read_some(asio::buffer(buf), ec)) > 0 || !ec;) got.append(buf, n);
  const std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
  const bool probed = got.rfind(interim, 0) == 0;
  if (probed) got = got.substr(interim.size());
  BOOST_TEST_MESSAGE("half-closed client " << (probed ? "got" : "did not need") << " the interim answer");
  BOOST_TEST_REQUIRE(got.rfind("HTTP/1.1 200", 0) == 0, got.substr(0, 200));
  const auto j = json::parse(got.substr(got.find("\r\n\r\n") + 4));
  BOOST_TEST(j["usage"]["completion_tokens"] == 400);
  BOOST_TEST(aborts(test::http_request(serve.port(), "GET", "/metrics").body) == aborted_before + 1);
}

BOOST_AUTO_TEST_SUITE_END()

// The test model as a Mistral-format one: Mistral v0.3's chat template, and a tokenizer whose
// [TOOL_CALLS] is a special token (as in Mistral's own), so the marker has no text unless
// special tokens are kept.
std::string mistral_tools_model() {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/test-models/small-mistral-tools";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::remove(dir + "/" + f);
    std::filesystem::create_symlink(model_dir() + "/" + f, dir + "/" + f);
  }
  json t = json::parse(std::ifstream(model_dir() + "/tokenizer.json"));
  for (auto& a : t["added_tokens"])
    if (a["content"] == "<|start_header_id|>") a["content"] = "[TOOL_CALLS]";
  std::ofstream(dir + "/tokenizer.json") << t.dump();
  std::ifstream tmpl(std::string(TROUPE_SOURCE_DIR) + "/tests/chat/templates/mistral-v0.3.jinja");
  std::stringstream ss;
  ss << tmpl.rdbuf();
  std::ofstream(dir + "/tokenizer_config.json")
      << json{{"chat_template", ss.str()}, {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}}.dump();
  return dir;
}

// Strict tools under tool_choice "auto" on a Mistral-format model: the answer keeps special
// tokens' text, so its [TOOL_CALLS] token reaches the parser, and the grammar allows it and
// then only valid calls. A logit_bias on the marker makes this random model call at once.
// Streamed and not, the call is parsed with arguments that follow the schema.
BOOST_AUTO_TEST_CASE(a_mistral_model_opens_strict_tool_calls_with_its_special_marker) {
  const std::string dir = mistral_tools_model();
  const auto marker = tokenizer::tokenizer::load(dir + "/tokenizer.json")->token_id("[TOOL_CALLS]");
  BOOST_TEST_REQUIRE(marker.has_value());
  test::serve_process mistral({local_toml(), "--model", dir});
  BOOST_TEST_REQUIRE(mistral.port() != 0);
  const json tool = {{"type", "function"},
                     {"function", {{"name", "get_weather"}, {"description", "the weather in a city"}, {"strict", true},
                                   {"parameters", {{"type", "object"}, {"properties", {{"city", {{"enum", {"Paris", "Rome"}}}}}},
                                                   {"required", {"city"}}, {"additionalProperties", false}}}}}};
  json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"tools", {tool}}, {"tool_choice", "auto"}, {"parallel_tool_calls", false}, {"max_tokens", 200},
               {"temperature", 0}, {"logit_bias", {{std::to_string(*marker), 100}}}};
  auto r = test::post_json(mistral.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const json choice = r.json()["choices"][0];
  BOOST_TEST(choice["finish_reason"] == "tool_calls", r.body);
  BOOST_TEST_REQUIRE(choice["message"]["tool_calls"].size() == 1u, r.body);
  const json call = choice["message"]["tool_calls"][0];
  BOOST_TEST(call["function"]["name"] == "get_weather");
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  BOOST_TEST((args == json{{"city", "Paris"}} || args == json{{"city", "Rome"}}), args.dump());
  const json content = choice["message"]["content"];
  BOOST_TEST((content.is_null() || content.get<std::string>().find("TOOL_CALLS") == std::string::npos), content.dump());

  body["stream"] = true;
  r = test::post_json(mistral.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  std::string name, arguments, finish;
  for (const auto& e : r.events()) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0];
    if (c.contains("finish_reason") && !c["finish_reason"].is_null()) finish = c["finish_reason"];
    for (const auto& d : c["delta"].value("tool_calls", json::array())) {
      BOOST_TEST(d["index"] == 0);
      if (d["function"].contains("name")) name += d["function"]["name"].get<std::string>();
      if (d["function"].contains("arguments")) arguments += d["function"]["arguments"].get<std::string>();
    }
  }
  BOOST_TEST(finish == "tool_calls");
  BOOST_TEST(name == "get_weather");
  BOOST_TEST(json::parse(arguments) == args);  // greedy: the same call as unstreamed
}

namespace {

// The test model as a sentence-transformers embedding model: its files, plus modules.json and a
// Pooling config with `mode` (and a Normalize module when `normalize`).
std::string embedding_model(const std::string& name, const std::string& mode, bool normalize) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(TROUPE_BINARY_DIR) / "test-models" / name;
  fs::remove_all(dir);
  fs::create_directories(dir / "1_Pooling");
  for (const auto& f : fs::directory_iterator(model_dir())) fs::create_symlink(f.path(), dir / f.path().filename());
  json mods = json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                           {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});
  if (normalize) mods.push_back({{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  std::ofstream(dir / "modules.json") << mods.dump();
  json pooling = {{"word_embedding_dimension", 512}, {"pooling_mode_cls_token", false}, {"pooling_mode_mean_tokens", false},
                  {"pooling_mode_max_tokens", false}, {"pooling_mode_lasttoken", false}, {"include_prompt", true}};
  pooling["pooling_mode_" + mode] = true;
  std::ofstream(dir / "1_Pooling" / "config.json") << pooling.dump();
  return dir.string();
}

// What an independent float64 PyTorch forward and sentence-transformers' pooling give.
json reference_embeddings(const std::string& dir, const json& inputs) {
  const std::string ids = dir + "/embedding-inputs.json", out = dir + "/embedding-reference.json";
  std::ofstream(ids) << inputs.dump();
  const auto r = test::run_command("/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/reference/embedding_reference.py " +
                                   dir + " " + ids + " " + out);
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  std::ifstream in(out);
  return json::parse(in);
}

double max_difference(const json& a, const json& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i].get<double>() - b[i].get<double>()));
  return d;
}

}  // namespace

// /v1/embeddings of a model folder that says last-token pooling and normalization (as the
// Qwen2- and Mistral-based embedding models do), then one that says mean pooling: equal to an
// independent PyTorch forward and pooling within 1e-4, also while the same server generates,
// for token-id and text inputs, as floats and as base64.
BOOST_AUTO_TEST_CASE(embeddings_equal_an_independent_pytorch_pooling) {
  const json inputs = {{1, 5, 9, 200, 17}, std::vector<int>(300, 42), {7}};
  for (const auto& [mode, normalize] : {std::pair<std::string, bool>{"lasttoken", true}, {"mean_tokens", false}}) {
    const std::string dir = embedding_model("embedding-" + mode, mode, normalize);
    const json want = reference_embeddings(dir, inputs);
    test::serve_process serve({local_toml(), "--model", dir});
    BOOST_TEST_REQUIRE(serve.port() != 0);
    // A generation running all along: the embeddings are computed in its steps.
    std::thread gen([&] {
      auto g = test::post_json(serve.port(), "/v1/completions", {{"prompt", "Long ago"}, {"max_tokens", 64}, {"ignore_eos", true}});
      BOOST_TEST(g.status == 200, g.body);
    });
    auto r = test::post_json(serve.port(), "/v1/embeddings", {{"input", inputs}});
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    const json got = r.json();
    BOOST_TEST(got["object"] == "list");
    BOOST_TEST_REQUIRE(got["data"].size() == inputs.size());
    BOOST_TEST(got["usage"]["prompt_tokens"] == 306);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const json& e = got["data"][i];
      BOOST_TEST(e["index"] == i);
      BOOST_TEST_REQUIRE(e["embedding"].size() == want[i].size());
      BOOST_TEST(max_difference(e["embedding"], want[i]) <= 1e-4, mode << " input " << i);
    }
    // Text comes out as the tokens /tokenize gives (with the special tokens the tokenizer adds).
    const std::string text = "In the beginning was the Word";
    auto t = test::post_json(serve.port(), "/tokenize", {{"prompt", text}});
    BOOST_TEST_REQUIRE(t.status == 200, t.body);
    r = test::post_json(serve.port(), "/v1/embeddings", {{"input", text}, {"encoding_format", "base64"}});
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    const json by_text = reference_embeddings(dir, json::array({t.json()["tokens"]}));
    const std::string b64 = r.json()["data"][0]["embedding"].get<std::string>();
    std::string raw;  // base64 of little-endian float32
    int bits = 0, acc = 0;
    for (char c : b64) {
      const auto at = std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/").find(c);
      if (at == std::string::npos) break;
      acc = acc << 6 | int(at);
      if ((bits += 6) >= 8) raw += char((acc >> (bits -= 8)) & 0xff);
    }
    BOOST_TEST_REQUIRE(raw.size() == by_text[0].size() * 4);
    json floats = json::array();
    for (std::size_t k = 0; k < raw.size(); k += 4) {
      float f;
      std::memcpy(&f, raw.data() + k, 4);
      floats.push_back(f);
    }
    BOOST_TEST(max_difference(floats, by_text[0]) <= 1e-4, mode << " text input");
    // Shortened vectors are not served by name; the context bounds an input.
    r = test::post_json(serve.port(), "/v1/embeddings", {{"input", "x"}, {"dimensions", 8}});
    BOOST_TEST(r.status == 400);
    BOOST_TEST(r.json()["error"]["param"] == "dimensions");
    r = test::post_json(serve.port(), "/v1/embeddings", {{"input", std::vector<int>(5000, 7)}});
    BOOST_TEST(r.status == 413);
    gen.join();
  }
}

BOOST_AUTO_TEST_CASE(metrics_count_exactly_the_requests_made_and_pass_promtool) {
  // A server of its own, so every count is this test's.
  test::serve_process serve({local_toml(), "--model", model_dir()});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  int prompt_total = 0, generated_total = 0;
  for (int i = 0; i < 5; ++i) {
    const json body = {{"prompt", "count me " + std::to_string(i)}, {"max_tokens", 3 + i}, {"ignore_eos", true},
                       {"user", i % 2 ? "tenant-b" : "tenant-a"}, {"stream", i % 2 == 0}};
    auto r = test::post_json(serve.port(), "/v1/completions", body);
    BOOST_TEST_REQUIRE(r.status == 200);
    prompt_total += int(tok()->encode("count me " + std::to_string(i), true).size());
    generated_total += 3 + i;
  }
  BOOST_TEST(test::post_json(serve.port(), "/v1/completions", {{"prompt", 1}}).status == 400);
  const std::string m = test::http_request(serve.port(), "GET", "/metrics").body;
  BOOST_TEST(metric_sum(m, "troupe:request_success_total", "finished_reason=\"length\"") == 5.0);
  BOOST_TEST(metric_sum(m, "troupe:request_success_total", "tenant=\"tenant-b\"") == 2.0);
  BOOST_TEST(metric_sum(m, "troupe:time_to_first_token_seconds_count") == 5.0);
  BOOST_TEST(metric_sum(m, "troupe:e2e_request_latency_seconds_count", "tenant=\"tenant-a\"") == 3.0);
  BOOST_TEST(metric_sum(m, "troupe:inter_token_latency_seconds_count") == double(generated_total - 5));
  BOOST_TEST(metric_sum(m, "troupe:prompt_tokens_total") == double(prompt_total));
  BOOST_TEST(metric_sum(m, "troupe:generation_tokens_total") == double(generated_total));
  BOOST_TEST(metric_sum(m, "troupe:request_rejected_total", "code=\"400\"") == 1.0);
  BOOST_TEST(metric_sum(m, "troupe:num_requests_running") == 0.0);

  // promtool parses it; its only lint is the ':' that vLLM-style names carry ...
  const std::string file = std::string(TROUPE_BINARY_DIR) + "/metrics-colon.prom";
  std::ofstream(file) << m;
  auto p = test::run_command("promtool check metrics < " + file + " 2>&1");
  BOOST_TEST((p.status == 0 || p.status == 3), p.output);
  std::istringstream lines(p.output);
  std::string line;
  int lints = 0;
  while (std::getline(lines, line))
    if (!line.empty()) {
      ++lints;
      BOOST_TEST(line.find("metric names should not contain ':'") != std::string::npos, line);
    }
  BOOST_TEST(lints > 0);
  // ... and with metric_prefix = "troupe_" it passes outright.
  test::serve_process plain({topology_with("metrics-plain", "[frontend]\nmetric_prefix = \"troupe_\""), "--model", model_dir()});
  BOOST_TEST_REQUIRE(plain.port() != 0);
  BOOST_TEST(test::post_json(plain.port(), "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}).status == 200);
  std::ofstream(file) << test::http_request(plain.port(), "GET", "/metrics").body;
  p = test::run_command("promtool check metrics < " + file + " 2>&1");
  BOOST_TEST(p.status == 0, p.output);
}

BOOST_AUTO_TEST_CASE(overload_gets_429_and_no_replica_gets_503_with_retry_after) {
  test::serve_process one({topology_with("one-in-flight", "[frontend]\nmax_requests = 1\nretry_after = \"2s\""), "--model", model_dir()});
  BOOST_TEST_REQUIRE(one.port() != 0);
  // A long streaming request holds the only slot while a second one arrives.
  namespace asio = boost::asio;
  asio::io_context ioc;
  asio::ip::tcp::socket sock(ioc);
  sock.connect({asio::ip::make_address("127.0.0.1"), one.port()});
  const std::string body = json{{"prompt", "hold"}, {"max_tokens", 2000}, {"stream", true}, {"ignore_eos", true}}.dump();
  asio::write(sock, asio::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\n\r\n" + body));
  std::string got;
  char buf[4096];
  while (got.find("\"text\"") == std::string::npos) got.append(buf, sock.read_some(asio::buffer(buf)));
  auto r = test::post_json(one.port(), "/v1/completions", {{"prompt", "second"}});
  BOOST_TEST(r.status == 429);
  BOOST_TEST(r.headers["retry-after"] == "2");
  BOOST_TEST(r.json()["error"]["type"] == "rate_limit_error");
  sock.close();

  // A head whose replicas live on nodes that never joined: not ready, and says so.
  test::serve_process empty({std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml", "--model", model_dir()});
  BOOST_TEST_REQUIRE(empty.port() != 0);
  r = test::http_request(empty.port(), "GET", "/health");
  BOOST_TEST(r.status == 503);
  BOOST_TEST(r.headers.count("retry-after") == 1u);
  r = test::post_json(empty.port(), "/v1/completions", {{"prompt", "anyone?"}});
  BOOST_TEST(r.status == 503);
  BOOST_TEST(r.headers.count("retry-after") == 1u);
  BOOST_TEST(r.json()["error"]["message"].get<std::string>().find("no replica") != std::string::npos, r.body);
  BOOST_TEST(r.body.find("system_error") == std::string::npos, r.body);  // no CAF internals in the message
}

namespace {

// A connection that sends one request and reads its answer as it comes (a stream's events).
struct raw_exchange {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket sock{ioc};
  std::string got;
  raw_exchange(std::uint16_t port, const std::string& path, const json& body) {
    sock.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    timeval tv{60, 0};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string b = body.dump();
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(b.size()) + "\r\n\r\n" + b;
    boost::asio::write(sock, boost::asio::buffer(req));
  }
  // Reads until `needle` has arrived (true), or the connection ends or times out (false).
  bool read_until(const std::string& needle) {
    char buf[8192];
    while (got.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(sock.native_handle(), buf, sizeof buf, 0);
      if (n <= 0) return false;
      got.append(buf, std::size_t(n));
    }
    return true;
  }
};

}  // namespace

// SIGTERM cut every stream and request mid-answer. Now the head stops taking work (503, and
// /health 503), lets what is in flight finish within --shutdown-grace, then ends the streams
// still open with an error event and [DONE], and exits 0.
BOOST_AUTO_TEST_CASE(sigterm_drains_in_flight_requests_then_ends_open_streams_with_an_error_event) {
  // Simulated replicas with 100 ms steps: a 3-token request ends within the grace, a 400-token
  // stream does not.
  const std::string config = std::string(TROUPE_BINARY_DIR) + "/shutdown-sim.toml";
  std::ofstream(config) << "[model]\npreset = \"tiny\"\nbackend = \"sim\"\n[[nodes]]\nname = \"head\"\n"
                           "[[pools]]\nname = \"main\"\nreplicas = 1\nnodes = [\"head\"]\n"
                           "[scheduler]\nkv_memory = \"256MiB\"\n[sim]\nflops = 1e12\nbandwidth = \"1TB/s\"\nstep_overhead = \"100ms\"\n";
  test::serve_process serve({config, "--shutdown-grace", "2"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  raw_exchange shorter(serve.port(), "/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 10}, {"ignore_eos", true}});
  raw_exchange stream(serve.port(), "/v1/completions",
                      {{"prompt", {1, 2, 3}}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}});
  BOOST_TEST_REQUIRE(stream.read_until("data: {"));  // both are running
  serve.child().kill(SIGTERM);
  // Draining: /health says so (polled to a deadline), and new work is refused with Retry-After.
  bool draining = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20); !draining && std::chrono::steady_clock::now() < deadline;)
    draining = test::http_request(serve.port(), "GET", "/health").status == 503;
  BOOST_TEST_REQUIRE(draining);
  const auto refused = test::post_json(serve.port(), "/v1/completions", {{"prompt", {1, 2}}, {"max_tokens", 1}});
  BOOST_TEST(refused.status == 503, refused.body);
  BOOST_TEST(refused.headers.count("retry-after") == 1u);
  // In flight and short enough: answered whole.
  BOOST_TEST_REQUIRE(shorter.read_until("\"completion_tokens\":10"), shorter.got);
  BOOST_TEST(shorter.got.rfind("HTTP/1.1 200", 0) == 0u, shorter.got);
  // Still streaming at the end of the grace: an error event, then [DONE].
  BOOST_TEST_REQUIRE(stream.read_until("data: [DONE]"), stream.got);
  const auto error_at = stream.got.find("the server shut down before this request finished");
  BOOST_TEST(error_at != std::string::npos, stream.got);
  BOOST_TEST(error_at < stream.got.find("data: [DONE]"));
  const int status = serve.child().reap();
  BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0), "exit status " << status);
}
