// A reasoning model through `troupe serve`: the test model with a DeepSeek R1-style chat template
// (its generation prompt opens <think>) and "</think>" as a plain added token, as Qwen3's and
// R1's tokenizers have it. The reasoning comes back as reasoning_content, streamed and not; a
// structured-output constraint applies to the answer after it.
#define BOOST_TEST_MODULE reasoning_serve
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

const char* const r1_style_template =
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<|start_header_id|>user: {{ m['content'] }}<|eot_id|>"
    "{% elif m['role'] == 'assistant' %}<|start_header_id|>assistant: {{ m['content'].split('</think>')[-1] }}<|eot_id|>"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant: <think>\n{% endif %}";

std::string reasoning_model() {
  const std::string base = test::synth_model("small-llama-f32", test::preset("small"));
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/test-models/small-reasoning";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::remove(dir + "/" + f);
    std::filesystem::create_symlink(base + "/" + f, dir + "/" + f);
  }
  json t = json::parse(std::ifstream(base + "/tokenizer.json"));
  for (auto& a : t["added_tokens"])
    if (a["content"] == "<|end_header_id|>") a["content"] = "</think>", a["special"] = false;
  std::ofstream(dir + "/tokenizer.json") << t.dump();
  std::ofstream(dir + "/tokenizer_config.json")
      << json{{"chat_template", r1_style_template}, {"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}}.dump();
  return dir;
}

struct served {
  std::string dir = reasoning_model();
  test::serve_process serve{{std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", dir}};
};

// The reasoning and the content of a stream's deltas.
std::pair<std::string, std::string> streamed(const test::http_response& r) {
  std::string reasoning, content;
  for (const auto& e : r.events()) {
    if (e == "[DONE]") continue;
    const json d = json::parse(e)["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  return {reasoning, content};
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(reasoning, served)

// The prompt leaves <think> open and this random model never closes it: everything it writes is
// reasoning (as vLLM's deepseek_r1 parser has it), the same text the completions API gives for
// the rendered prompt.
BOOST_AUTO_TEST_CASE(an_answer_inside_open_reasoning_is_reasoning_content_streamed_and_not) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  json body = {{"messages", {{{"role", "user"}, {"content", "Why is the sky blue?"}}}}, {"max_tokens", 12}, {"temperature", 0}};
  auto r = test::post_json(serve.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const json message = r.json()["choices"][0]["message"];
  BOOST_TEST_REQUIRE(message["reasoning_content"].is_string(), r.body);
  BOOST_TEST(!message["reasoning_content"].get<std::string>().empty());
  BOOST_TEST(message["content"] == "");

  const std::string prompt = "<|begin_of_text|><|start_header_id|>user: Why is the sky blue?<|eot_id|><|start_header_id|>assistant: <think>\n";
  const auto ids = tokenizer::tokenizer::load(dir + "/tokenizer.json")->encode(prompt, false);
  const auto c = test::post_json(serve.port(), "/v1/completions", {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}});
  BOOST_TEST_REQUIRE(c.status == 200, c.body);
  BOOST_TEST(c.json()["choices"][0]["text"] == message["reasoning_content"]);

  body["stream"] = true;
  r = test::post_json(serve.port(), "/v1/chat/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  const auto [reasoning, content] = streamed(r);
  BOOST_TEST(reasoning == message["reasoning_content"].get<std::string>());
  BOOST_TEST(content.empty());
}

// A JSON schema with the reasoning open: the grammar leaves the reasoning free up to </think>
// (which a logit bias makes this model write at once) and holds the answer after it to the
// schema; the bias cannot put </think> into the answer, where the grammar masks it first.
BOOST_AUTO_TEST_CASE(a_json_schema_constrains_the_answer_after_the_reasoning) {
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto end = tokenizer::tokenizer::load(dir + "/tokenizer.json")->token_id("</think>");
  BOOST_TEST_REQUIRE(end.has_value());
  const json schema = {{"type", "object"}, {"properties", {{"n", {{"enum", {1, 2, 3}}}}}}, {"required", {"n"}},
                       {"additionalProperties", false}};
  json body = {{"messages", {{{"role", "user"}, {"content", "Pick a number."}}}}, {"max_tokens", 60}, {"temperature", 0},
               {"logit_bias", {{std::to_string(*end), 100}}},
               {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "pick"}, {"schema", schema}}}}}};
  for (bool stream : {false, true}) {
    body["stream"] = stream;
    const auto r = test::post_json(serve.port(), "/v1/chat/completions", body);
    BOOST_TEST_REQUIRE(r.status == 200, r.body);
    std::string reasoning, content;
    if (stream) {
      std::tie(reasoning, content) = streamed(r);
    } else {
      const json message = r.json()["choices"][0]["message"];
      BOOST_TEST_REQUIRE(message["reasoning_content"].is_string(), r.body);
      reasoning = message["reasoning_content"];
      content = message["content"];
      BOOST_TEST(r.json()["choices"][0]["finish_reason"] == "stop", r.body);
    }
    BOOST_TEST(reasoning.empty());
    const json answer = json::parse(content);
    BOOST_TEST((answer == json{{"n", 1}} || answer == json{{"n", 2}} || answer == json{{"n", 3}}), content);
  }
}

BOOST_AUTO_TEST_SUITE_END()
