// Parsing OpenAI request bodies: defaults, every field's checks with the field named, and the
// response shapes.
#define BOOST_TEST_MODULE openai
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "runtime/api/choices.h"
#include "runtime/api/openai.h"
#include "runtime/api/tokenize.h"
#include "runtime/structured/constraint.h"

using namespace troupe;
using api::endpoint;
using json = nlohmann::json;

namespace {

std::string param_of(const json& body, endpoint e = endpoint::completions) {
  try {
    api::parse_request(body.dump(), e);
  } catch (const api::api_error& err) {
    BOOST_TEST(err.status() == 400);
    return err.param();
  }
  return "accepted";
}

}  // namespace

BOOST_AUTO_TEST_CASE(completions_fields_and_defaults) {
  auto r = api::parse_request(R"({"prompt": "hi", "max_tokens": 5, "temperature": 0, "top_k": -1, "stop": "x",
                                  "seed": 9, "stream": true, "stream_options": {"include_usage": true},
                                  "user": "acme", "priority": -2, "logprobs": 3})", endpoint::completions);
  BOOST_TEST_REQUIRE(r.prompts.size() == 1u);
  BOOST_TEST(*r.prompts[0].text == "hi");
  BOOST_TEST(r.params.max_tokens == 5);
  BOOST_TEST(r.max_tokens_given);
  BOOST_TEST(r.params.greedy());
  BOOST_TEST(r.params.top_k == 0);
  BOOST_TEST(r.params.stop == std::vector<std::string>{"x"});
  BOOST_TEST(*r.params.seed == 9u);
  BOOST_TEST(r.stream);
  BOOST_TEST(r.include_usage);
  BOOST_TEST(r.user == "acme");
  BOOST_TEST(r.priority == -2);
  BOOST_TEST(r.params.logprobs == 3);
  r = api::parse_request(R"({"prompt": [[1, 2, 3]]})", endpoint::completions);  // a batch of one
  BOOST_TEST_REQUIRE(r.prompts.size() == 1u);
  BOOST_TEST((r.prompts[0].ids == std::vector<std::int32_t>{1, 2, 3}));
  r = api::parse_request(R"({"prompt": ["a", [4, 5], "b"], "n": 2, "best_of": 3})", endpoint::completions);  // a batch
  BOOST_TEST_REQUIRE(r.prompts.size() == 3u);
  BOOST_TEST(*r.prompts[2].text == "b");
  BOOST_TEST((r.prompts[1].ids == std::vector<std::int32_t>{4, 5}));
  BOOST_TEST(r.n == 2);
  BOOST_TEST(r.best_of == 3);
  BOOST_TEST(!r.max_tokens_given);
  BOOST_TEST(r.params.logprobs == -1);
}

BOOST_AUTO_TEST_CASE(chat_fields) {
  auto r = api::parse_request(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                  {"type": "text", "text": "b"}]}], "logprobs": true, "top_logprobs": 2,
                                  "max_completion_tokens": 7, "chat_template_kwargs": {"enable_thinking": false}})",
                              endpoint::chat);
  BOOST_TEST(r.messages[0]["content"] == "ab");
  BOOST_TEST(r.params.logprobs == 2);
  BOOST_TEST(r.params.max_tokens == 7);
  BOOST_TEST(r.template_kwargs["enable_thinking"] == false);
}

BOOST_AUTO_TEST_CASE(each_bad_field_is_named) {
  BOOST_TEST(param_of({{"prompt", 3}}) == "prompt");
  BOOST_TEST(param_of({{"prompt", ""}}) == "prompt");
  BOOST_TEST(param_of({{"prompt", {"a", "b"}}}) == "accepted");  // a batch of two
  BOOST_TEST(param_of(json::object()) == "prompt");
  BOOST_TEST(param_of({{"prompt", "x"}, {"max_tokens", 0}}) == "max_tokens");
  BOOST_TEST(param_of({{"prompt", "x"}, {"temperature", -1}}) == "temperature");
  BOOST_TEST(param_of({{"prompt", "x"}, {"top_p", 0}}) == "top_p");
  BOOST_TEST(param_of({{"prompt", "x"}, {"min_p", 2}}) == "min_p");
  BOOST_TEST(param_of({{"prompt", "x"}, {"presence_penalty", 3}}) == "presence_penalty");
  BOOST_TEST(param_of({{"prompt", "x"}, {"frequency_penalty", "no"}}) == "frequency_penalty");
  BOOST_TEST(param_of({{"prompt", "x"}, {"repetition_penalty", 0}}) == "repetition_penalty");
  BOOST_TEST(param_of({{"prompt", "x"}, {"seed", 1.5}}) == "seed");
  BOOST_TEST(param_of({{"prompt", "x"}, {"stop", {1}}}) == "stop");
  BOOST_TEST(param_of({{"prompt", "x"}, {"n", 0}}) == "n");
  BOOST_TEST(param_of({{"prompt", "x"}, {"n", 2}, {"best_of", 1}}) == "best_of");
  BOOST_TEST(param_of({{"prompt", "x"}, {"n", 2}, {"best_of", 3}, {"stream", true}}) == "best_of");
  BOOST_TEST(param_of({{"prompt", json::array({"a", "b"})}, {"n", 65}}) == "n");  // 130 choices
  BOOST_TEST(param_of({{"prompt", json::array({"a", json::array()})}}) == "prompt");
  BOOST_TEST(param_of({{"prompt", json::array({"a", 3})}}) == "prompt");
  BOOST_TEST(param_of({{"prompt", "x"}, {"logprobs", 50}}) == "logprobs");
  BOOST_TEST(param_of({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}) == "stream_options");
  BOOST_TEST(param_of({{"prompt", "x"}, {"stream", "yes"}}) == "stream");
  BOOST_TEST(param_of({{"prompt", "x"}, {"echo", 1}}) == "echo");
  // A raw NUL in `user` reached the /metrics text as a tenant label.
  BOOST_TEST(param_of({{"prompt", "x"}, {"user", std::string("ac\0me", 5)}}) == "user");
  BOOST_TEST(param_of({{"prompt", "x"}, {"user", "a\nb"}}) == "user");
  BOOST_TEST(param_of({{"messages", json::array()}}, endpoint::chat) == "messages");
  BOOST_TEST(param_of({{"messages", {{{"content", "x"}}}}}, endpoint::chat) == "messages[0].role");
  BOOST_TEST(param_of({{"messages", {{{"role", "user"}, {"content", 5}}}}}, endpoint::chat) == "messages[0].content");
  BOOST_TEST(param_of({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, endpoint::chat) == "top_logprobs");
  try {
    api::parse_request("[1]", endpoint::completions);
    BOOST_FAIL("accepted");
  } catch (const api::api_error& e) {
    BOOST_TEST(std::string(e.what()) == "the body must be a JSON object, got an array");
  }
}

BOOST_AUTO_TEST_CASE(response_shapes) {
  api::response_writer w(endpoint::chat, "chatcmpl-1", "m", 42, nullptr, false);
  const json full = w.full("hello", {}, "stop", {3, 1});
  BOOST_TEST(full["object"] == "chat.completion");
  BOOST_TEST(full["choices"][0]["message"]["content"] == "hello");
  BOOST_TEST(full["usage"]["total_tokens"] == 4);
  BOOST_TEST(w.role_chunk()["choices"][0]["delta"]["role"] == "assistant");
  const json last = w.chunk("", {}, std::string("length"));
  BOOST_TEST(last["choices"][0]["delta"].empty());
  BOOST_TEST(last["choices"][0]["finish_reason"] == "length");
  const api::api_error e(429, "slow down");
  BOOST_TEST(e.body()["error"]["type"] == "rate_limit_error");
  BOOST_TEST(e.body()["error"]["param"].is_null());
  BOOST_TEST(!api::openai_finish_reason("abort").has_value());
}

// A 40 KB body of 20,000 nested arrays crashed the server: copying the parsed tree into the
// template's values recursed once per level, on the multiplexer thread's stack.
BOOST_AUTO_TEST_CASE(deeply_nested_json_is_refused_before_it_becomes_a_tree) {
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  for (const std::string& body :
       {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": " + deep + "}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"a\": " + deep + "}}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"extra\": " + deep + "}]}"}) {
    try {
      api::parse_request(body, endpoint::chat);
      BOOST_FAIL("accepted");
    } catch (const api::api_error& e) {
      BOOST_TEST(e.status() == 400);
      BOOST_TEST(std::string(e.what()) == "the body: JSON nested deeper than 128 levels");
    }
  }
  // Brackets inside strings are text, not nesting; 128 levels are fine.
  const std::string ok = std::string(126, '[') + std::string(126, ']');
  BOOST_TEST(param_of(json::parse("{\"prompt\": \"" + std::string(500, '[') + "\", \"user\": " + "\"x\"}")) == "accepted");
  BOOST_TEST(param_of(json::parse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"a\": " +
                                  ok + "}}"),
                      endpoint::chat) == "accepted");
}

// Fields that were accepted and silently ignored: the cheap ones are read, the rest refused by
// name, and so is any field this server does not know.
BOOST_AUTO_TEST_CASE(no_field_is_accepted_and_ignored) {
  const json chat_msgs = {{{"role", "user"}, {"content", "x"}}};
  auto r = api::parse_request(json{{"prompt", "x"}, {"logit_bias", {{"17", 5}, {"3", -100}}}, {"min_tokens", 4},
                                   {"max_tokens", 8}, {"include_stop_str_in_output", true}}.dump(),
                              endpoint::completions);
  BOOST_TEST(r.params.logit_bias.size() == 2u);
  BOOST_TEST(r.params.min_tokens == 4);
  BOOST_TEST(r.params.include_stop_str_in_output);
  BOOST_TEST(param_of({{"prompt", "x"}, {"logit_bias", {{"x", 1}}}}) == "logit_bias");
  BOOST_TEST(param_of({{"prompt", "x"}, {"logit_bias", {{"1", 101}}}}) == "logit_bias");
  BOOST_TEST(param_of({{"prompt", "x"}, {"min_tokens", 9}, {"max_tokens", 8}}) == "min_tokens");
  BOOST_TEST(param_of({{"prompt", "x"}, {"prompt_logprobs", 21}}) == "prompt_logprobs");
  BOOST_TEST(param_of({{"prompt", "x"}, {"prompt_logprobs", -1}}) == "prompt_logprobs");
  r = api::parse_request(json{{"prompt", "x"}, {"echo", true}, {"logprobs", 2}}.dump(), endpoint::completions);
  BOOST_TEST(r.echo);
  BOOST_TEST(r.params.prompt_logprobs == 2);  // echo with logprobs scores the prompt
  BOOST_TEST(!r.prompt_logprobs_list);
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"response_format", {{"type", "json_object"}}}}, endpoint::chat) == "accepted");
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"response_format", {{"type", "text"}}}}, endpoint::chat) == "accepted");
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"tool_choice", "required"}}, endpoint::chat) == "tool_choice");  // no tools
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"tool_choice", {{"type", "function"}}}}, endpoint::chat) == "tool_choice");
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"tool_choice", "auto"}}, endpoint::chat) == "accepted");
  BOOST_TEST(param_of({{"prompt", "x"}, {"frequency_penaltyy", 1}}) == "frequency_penaltyy");
  BOOST_TEST(param_of({{"prompt", "x"}, {"messages", chat_msgs}}) == "messages");  // a chat field on completions
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"echo", true}}, endpoint::chat) == "echo");
}

// What the OpenAI SDKs and vLLM clients send that changes nothing Troupe computes: accepted and
// recorded, each type-checked, and refused at a value that would change the output.
BOOST_AUTO_TEST_CASE(fields_that_change_nothing_are_accepted_and_recorded) {
  const json chat_msgs = {{{"role", "user"}, {"content", "x"}}};
  auto r = api::parse_request(json{{"messages", chat_msgs}, {"store", false}, {"metadata", {{"run", "a"}}},
                                   {"service_tier", "auto"}, {"skip_special_tokens", true},
                                   {"spaces_between_special_tokens", true}}.dump(),
                              endpoint::chat);
  std::sort(r.no_effect_fields.begin(), r.no_effect_fields.end());
  BOOST_TEST(r.no_effect_fields == (std::vector<std::string>{"metadata", "service_tier", "spaces_between_special_tokens", "store"}),
             boost::test_tools::per_element());
  BOOST_TEST(r.params.skip_special_tokens);  // honoured, not recorded: false keeps special tokens' text
  BOOST_TEST(!api::parse_request(json{{"prompt", "x"}, {"skip_special_tokens", false}}.dump(), endpoint::completions)
                  .params.skip_special_tokens);
  BOOST_TEST(api::parse_request(json{{"prompt", "x"}, {"store", true}}.dump(), endpoint::completions).no_effect_fields ==
                 std::vector<std::string>{"store"},
             boost::test_tools::per_element());
  BOOST_TEST(param_of({{"prompt", "x"}, {"skip_special_tokens", "no"}}) == "skip_special_tokens");
  BOOST_TEST(param_of({{"prompt", "x"}, {"store", "yes"}}) == "store");
  BOOST_TEST(param_of({{"prompt", "x"}, {"metadata", "x"}}) == "metadata");
  json many = json::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  BOOST_TEST(param_of({{"prompt", "x"}, {"metadata", many}}) == "metadata");
  BOOST_TEST(param_of({{"prompt", "x"}, {"stor", true}}) == "stor");  // a near miss is still unknown
}

// Structured output in its three spellings becomes one constraint; a schema keeps the client's
// property order; two at once, unknown keys inside them, and constraints that do not compile are
// 400s naming the field.
BOOST_AUTO_TEST_CASE(structured_output_fields_become_one_constraint) {
  using kind = sampling::output_constraint::kind;
  const json chat_msgs = {{{"role", "user"}, {"content", "x"}}};
  const std::string ordered = R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",
      "json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}}}}})";
  auto r = api::parse_request(ordered, endpoint::chat);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::json_schema));
  BOOST_TEST(r.params.constraint.source.find("zeta") < r.params.constraint.source.find("alpha"));  // the client's order
  r = api::parse_request(json{{"prompt", "x"}, {"guided_choice", {"a", "b"}}}.dump(), endpoint::completions);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::choice));
  r = api::parse_request(json{{"prompt", "x"}, {"guided_regex", "[0-9]+"}, {"guided_decoding_backend", "xgrammar"}}.dump(),
                         endpoint::completions);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::regex));
  BOOST_TEST(r.no_effect_fields == std::vector<std::string>{"guided_decoding_backend"}, boost::test_tools::per_element());
  r = api::parse_request(json{{"prompt", "x"}, {"structured_outputs", {{"grammar", "root ::= \"a\"+"}}}}.dump(), endpoint::completions);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::grammar));
  r = api::parse_request(json{{"prompt", "x"}, {"guided_json", R"({"type":"integer"})"}}.dump(), endpoint::completions);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::json_schema));
  r = api::parse_request(json{{"messages", chat_msgs}, {"response_format", {{"type", "text"}}}}.dump(), endpoint::chat);
  BOOST_TEST(r.params.constraint.empty());
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_regex", "a"}, {"guided_choice", {"b"}}}) == "guided_choice");
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_regex", "(a"}}) == "guided_regex");
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_grammar", "root ::= x"}}) == "guided_grammar");
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_json", {{"type", "object"}, {"patternProperties", json::object()}}}}) ==
             "guided_json");
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_whitespace_pattern", " "}}) == "guided_whitespace_pattern");
  BOOST_TEST(param_of({{"prompt", "x"}, {"structured_outputs", {{"regex", "a"}, {"whitespace_pattern", " "}}}}) ==
             "structured_outputs.whitespace_pattern");
  BOOST_TEST(param_of({{"prompt", "x"}, {"guided_choice", {"a"}}, {"ignore_eos", true}}) == "ignore_eos");
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"response_format", {{"type", "json_schema"}}}}, endpoint::chat) ==
             "response_format.json_schema");
  BOOST_TEST(param_of({{"messages", chat_msgs}, {"response_format", {{"type", "yaml"}}}}, endpoint::chat) == "response_format.type");
}

BOOST_AUTO_TEST_CASE(sampling_fields_left_out_take_the_models_defaults) {
  sampling::sampling_params d;
  d.temperature = 0.6f;
  d.top_k = 20;
  auto r = api::parse_request(json{{"prompt", "x"}, {"top_k", 5}}.dump(), endpoint::completions, d);
  BOOST_TEST(r.params.temperature == 0.6f);
  BOOST_TEST(r.params.top_k == 5);
}

// Found by the fuzzer: an integral float past long long's range was converted with undefined
// behaviour, and an error message echoing invalid UTF-8 from the body could not be serialized.
BOOST_AUTO_TEST_CASE(huge_numbers_and_invalid_utf8_in_errors_are_handled) {
  BOOST_TEST(param_of({{"prompt", "x"}, {"max_tokens", 4.4e31}}) == "max_tokens");
  try {
    api::parse_request(std::string("{\"prompt\": \"x\", \"\xa1\xa2\": 1}"), endpoint::completions);
    BOOST_FAIL("accepted");
  } catch (const api::api_error& e) {
    BOOST_TEST(e.body().dump().find("not valid JSON") != std::string::npos);  // dump() threw on the echoed bytes
  }
}

// A field sent with another type than the one compared against threw nlohmann's type_error out
// of the parser (a 500 from the server, an abort in chat_render_fuzz) instead of a 400.
BOOST_AUTO_TEST_CASE(a_typed_field_of_another_type_is_refused_by_name) {
  const json user = {{"role", "user"}, {"content", "x"}};
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  auto chat = [&](json extra) {
    json body = {{"messages", {user}}};
    body.update(extra);
    return param_of(body, endpoint::chat);
  };
  BOOST_TEST(param_of({{"messages", {{{"role", "user"}, {"content", {{{"type", 5}, {"text", "x"}}}}}}}}, endpoint::chat) ==
             "messages[0].content");
  BOOST_TEST(chat({{"tools", {{{"type", 5}, {"function", {{"name", "f"}}}}}}}) == "tools[0].type");
  BOOST_TEST(chat({{"tools", {tool}}, {"tool_choice", {{"type", 3}}}}) == "tool_choice");
  BOOST_TEST(chat({{"tools", {tool}}, {"tool_choice", {{"type", nullptr}}}}) == "tool_choice");
  BOOST_TEST(chat({{"response_format", {{"type", 7}}}}) == "response_format.type");
  const json call = {{"type", 1}, {"function", {{"name", "f"}, {"arguments", "{}"}}}};
  BOOST_TEST(param_of({{"messages", {user, {{"role", "assistant"}, {"tool_calls", {call}}}}}}, endpoint::chat) ==
             "messages[1].tool_calls[0].type");
  BOOST_TEST(chat({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"strict", nullptr}}}}}}}) == "accepted");
}

// max_tokens 2^31 was clamped to 2^30 and the context error then spoke of "1073741824".
BOOST_AUTO_TEST_CASE(a_max_tokens_too_large_is_refused_with_the_value_sent) {
  try {
    api::parse_request(json{{"prompt", "x"}, {"max_tokens", 2147483648LL}}.dump(), endpoint::completions);
    BOOST_FAIL("accepted");
  } catch (const api::api_error& e) {
    BOOST_TEST(e.param() == "max_tokens");
    BOOST_TEST(std::string(e.what()).find("is 2147483648") != std::string::npos, e.what());
  }
  BOOST_TEST(param_of({{"prompt", "x"}, {"max_tokens", 1 << 30}}) == "accepted");
}

BOOST_AUTO_TEST_CASE(tokenize_and_detokenize_bodies_are_checked_field_by_field) {
  auto t = api::parse_tokenize(R"({"prompt": "hi", "add_special_tokens": false, "return_token_strs": true})");
  BOOST_TEST(*t.prompt == "hi");
  BOOST_TEST(*t.add_special_tokens == false);
  BOOST_TEST(t.return_token_strs);
  t = api::parse_tokenize(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]})");
  BOOST_TEST(!t.prompt);
  BOOST_TEST(t.messages[0]["content"] == "a");
  BOOST_TEST(!t.add_special_tokens.has_value());
  BOOST_TEST(t.add_generation_prompt);
  auto param = [](auto parse, const std::string& body) {
    try {
      parse(body);
    } catch (const api::api_error& e) {
      BOOST_TEST(e.status() == 400);
      return e.param();
    }
    return std::string("accepted");
  };
  BOOST_TEST(param(api::parse_tokenize, R"({"prompt": "a", "messages": []})") == "prompt");  // exactly one
  BOOST_TEST(param(api::parse_tokenize, R"({})") == "prompt");
  BOOST_TEST(param(api::parse_tokenize, R"({"prompt": 5})") == "prompt");
  BOOST_TEST(param(api::parse_tokenize, R"({"messages": [{"role": "wizard", "content": "x"}]})") == "messages[0].role");
  BOOST_TEST(param(api::parse_tokenize, R"({"prompt": "a", "add_special_tokens": "yes"})") == "add_special_tokens");
  BOOST_TEST(param(api::parse_tokenize, R"({"prompt": "a", "truncate_prompt_tokens": 3})") == "truncate_prompt_tokens");
  // Tools beside messages go to the template as a chat request's do; checked the same way.
  t = api::parse_tokenize(R"({"messages": [{"role": "user", "content": "a"}],
                              "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  BOOST_TEST(t.template_kwargs["tools"][0]["function"]["name"] == "f");
  BOOST_TEST(param(api::parse_tokenize, R"({"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "web"}]})")
                 .rfind("tools[0]", 0) == 0);
  BOOST_TEST(param(api::parse_tokenize, R"({"prompt": "a", "tools": []})") == "tools");
  BOOST_TEST(param(api::parse_detokenize, R"({"tokens": [1, "2"]})") == "tokens");
  BOOST_TEST(param(api::parse_detokenize, R"({"tokens": [1, 99999999999]})") == "tokens");
  BOOST_TEST(param(api::parse_detokenize, R"({"model": "m"})") == "tokens");
  BOOST_TEST(api::parse_detokenize(R"({"tokens": [1, 2]})").tokens.size() == 2u);
}

namespace {

json weather_tool(bool strict = false) {
  json params = {{"type", "object"}, {"required", {"city"}}};
  params["properties"]["city"] = {{"type", "string"}};
  json f = {{"name", "get_weather"}, {"strict", strict}, {"parameters", params}};
  return {{"type", "function"}, {"function", f}};
}

bool grammar_takes(const sampling::output_constraint& c, const std::string& text) {
  structured::grammar_matcher m(structured::compile_constraint(c));
  return m.accept(text) && m.complete();
}

}  // namespace

// tools, tool_choice and parallel_tool_calls: checked field by field; "auto" hands the tools to
// the template and constrains nothing; "required" and a named function constrain the output to
// a JSON list of calls whose arguments match the schemas ($defs and recursion included).
BOOST_AUTO_TEST_CASE(tools_and_tool_choice) {
  using kind = sampling::output_constraint::kind;
  const json msgs = {{{"role", "user"}, {"content", "x"}}};
  auto r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool()}}}.dump(), endpoint::chat);
  BOOST_TEST(int(r.tools.mode) == int(api::tool_request::choice::automatic));
  BOOST_TEST(r.template_kwargs["tools"].size() == 1u);
  BOOST_TEST(r.params.constraint.empty());
  r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool()}}, {"tool_choice", "none"}}.dump(), endpoint::chat);
  BOOST_TEST(!r.template_kwargs.contains("tools"));

  r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool(true)}}, {"tool_choice", "required"}}.dump(), endpoint::chat);
  BOOST_TEST(int(r.params.constraint.type) == int(kind::json_schema));
  BOOST_TEST(grammar_takes(r.params.constraint, R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])"));
  BOOST_TEST(grammar_takes(r.params.constraint, R"([{"name": "get_weather", "parameters": {"city": "a"}}, {"name": "get_weather", "parameters": {"city": "b"}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "get_weather", "parameters": {}}])"));  // city is required
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "get_time", "parameters": {"city": "Paris"}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, "[]"));

  // A named choice of two, one call only; the other tool's $defs and root recursion rewritten.
  json tree = {{"type", "function"},
               {"function", {{"name", "tree"},
                             {"parameters", {{"type", "object"},
                                             {"properties", {{"leaf", {{"$ref", "#/$defs/leaf"}}}, {"kids", {{"type", "array"}, {"items", {{"$ref", "#"}}}}}}},
                                             {"required", {"leaf"}}, {"additionalProperties", false},
                                             {"$defs", {{"leaf", {{"type", "integer"}}}}}}}}}};
  r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool(), tree}},
                              {"tool_choice", {{"type", "function"}, {"function", {{"name", "tree"}}}}}}.dump(), endpoint::chat);
  // (json sorts keys: "kids" comes first in the body, so in the grammar.)
  BOOST_TEST(grammar_takes(r.params.constraint, R"([{"name": "tree", "parameters": {"kids": [{"kids": [], "leaf": 2}], "leaf": 1}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "tree", "parameters": {"leaf": 1, "kids": [{"leaf": 2}]}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "tree", "parameters": {"kids": [{"leaf": "2"}], "leaf": 1}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "get_weather", "parameters": {"city": "x"}}])"));
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "tree", "parameters": {"leaf": 1}}, {"name": "tree", "parameters": {"leaf": 1}}])"));
  r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool()}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}.dump(),
                         endpoint::chat);
  BOOST_TEST(!r.tools.parallel);
  BOOST_TEST(!grammar_takes(r.params.constraint, R"([{"name": "get_weather", "parameters": {"city": "a"}}, {"name": "get_weather", "parameters": {"city": "b"}}])"));

  auto bad = [&](json body) {
    body["messages"] = msgs;
    return param_of(body, endpoint::chat);
  };
  BOOST_TEST(bad({{"tools", {weather_tool(), weather_tool()}}}) == "tools[1].function.name");
  BOOST_TEST(bad({{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}}) == "tools[0].function.name");
  BOOST_TEST(bad({{"tools", {{{"type", "retrieval"}}}}}) == "tools[0].type");
  BOOST_TEST(bad({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"returns", 1}}}}}}}) == "tools[0].function.returns");
  BOOST_TEST(bad({{"tools", {weather_tool()}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}) ==
             "tool_choice.function.name");
  BOOST_TEST(bad({{"tools", {weather_tool()}}, {"tool_choice", "sometimes"}}) == "tool_choice");
  BOOST_TEST(bad({{"tools", {weather_tool()}}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}) == "tool_choice");
  BOOST_TEST(bad({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"patternProperties", json::object()}}}}}}}},
                  {"tool_choice", "required"}}) == "tools[0].function.parameters");
  BOOST_TEST(bad({{"parallel_tool_calls", "yes"}}) == "parallel_tool_calls");
  BOOST_TEST(param_of({{"prompt", "x"}, {"tools", {weather_tool()}}}) == "tools");  // chat only
}

// The conversation's tool calls and results: arguments strings become objects for templates.
BOOST_AUTO_TEST_CASE(assistant_tool_calls_in_messages) {
  const json call = {{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"a\": 1}"}}}};
  const json msgs = {{{"role", "user"}, {"content", "x"}},
                     {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                     {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}};
  const json m = api::parse_messages(msgs);
  BOOST_TEST(m[1]["tool_calls"][0]["function"]["arguments"] == json({{"a", 1}}));
  BOOST_TEST(m[1]["content"] == "");
  auto bad = [&](json message) {
    try {
      api::parse_messages(json::array({message}));
    } catch (const api::api_error& e) {
      return e.param();
    }
    return std::string("accepted");
  };
  json broken = call;
  broken["function"]["arguments"] = "{not json";
  BOOST_TEST(bad({{"role", "assistant"}, {"tool_calls", {broken}}}) == "messages[0].tool_calls[0].function.arguments");
  BOOST_TEST(bad({{"role", "user"}, {"content", "x"}, {"tool_calls", {call}}}) == "messages[0].tool_calls");
  BOOST_TEST(bad({{"role", "tool"}, {"content", "x"}, {"tool_call_id", 7}}) == "messages[0].tool_call_id");
}

// With tool calls expected, stream chunks carry content and calls apart, and the last chunk
// says "tool_calls"; the full response has them in message.tool_calls with content null.
BOOST_AUTO_TEST_CASE(tool_call_responses) {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  api::response_writer whole(endpoint::chat, "chatcmpl-x1", "m", 1, nullptr, false);
  whole.expect_tool_calls(chat::tool_format::hermes, true);
  const json full = whole.full(text, {}, "stop", {3, 9});
  BOOST_TEST(full["choices"][0]["finish_reason"] == "tool_calls");
  BOOST_TEST(full["choices"][0]["message"]["content"].is_null());
  BOOST_TEST(full["choices"][0]["message"]["tool_calls"][0]["id"] == "call_x1_0");
  BOOST_TEST(full["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{\"a\": 1}");

  api::response_writer w(endpoint::chat, "chatcmpl-x1", "m", 1, nullptr, false);
  w.expect_tool_calls(chat::tool_format::hermes, true);
  std::vector<json> chunks;
  for (std::size_t i = 0; i < text.size(); i += 7)
    for (auto& c : w.chunks(text.substr(i, 7), {}, std::nullopt)) chunks.push_back(c);
  for (auto& c : w.chunks("", {}, std::string("stop"))) chunks.push_back(c);
  std::string name, args, content;
  for (const auto& c : chunks) {
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const auto& t : d["tool_calls"]) {
        if (t.contains("id")) name = t["function"]["name"];
        args += t["function"]["arguments"].get<std::string>();
      }
  }
  BOOST_TEST(content.empty());
  BOOST_TEST(name == "f");
  BOOST_TEST(args == "{\"a\": 1}");
  BOOST_TEST(chunks.back()["choices"][0]["finish_reason"] == "tool_calls");
}

// A reasoning model's answer: the reasoning as message.reasoning_content and as
// delta.reasoning_content chunks, the answer after it as content, tool calls looked for in the
// answer only (a call inside the reasoning is the reasoning's text).
BOOST_AUTO_TEST_CASE(reasoning_responses) {
  const std::string text = "<think>\nMaybe <tool_call>{\"name\": \"no\"}</tool_call>?\n</think>\n\n"
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  api::response_writer whole(endpoint::chat, "chatcmpl-r1", "m", 1, nullptr, false);
  whole.expect_tool_calls(chat::tool_format::hermes, true);
  whole.expect_reasoning({}, false);
  const json full = whole.full(text, {}, "stop", {3, 9});
  const json& message = full["choices"][0]["message"];
  BOOST_TEST(message["reasoning_content"] == "\nMaybe <tool_call>{\"name\": \"no\"}</tool_call>?\n");
  BOOST_TEST(message["tool_calls"].size() == 1);
  BOOST_TEST(message["tool_calls"][0]["function"]["name"] == "f");
  BOOST_TEST(message["content"].is_null());  // the white space before a call is the call's
  BOOST_TEST(full["choices"][0]["finish_reason"] == "tool_calls");

  api::response_writer w(endpoint::chat, "chatcmpl-r1", "m", 1, nullptr, false);
  w.expect_tool_calls(chat::tool_format::hermes, true);
  w.expect_reasoning({}, false);
  std::string reasoning, content, name;
  for (std::size_t i = 0; i <= text.size(); i += 5) {
    const bool last = i + 5 > text.size();
    for (const auto& c : w.chunks(text.substr(i, 5), {}, last ? std::optional<std::string>("stop") : std::nullopt)) {
      const json& d = c["choices"][0]["delta"];
      BOOST_TEST(!(d.contains("reasoning_content") && d.contains("content")));
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls") && d["tool_calls"][0].contains("id")) name += d["tool_calls"][0]["function"]["name"].get<std::string>();
    }
  }
  BOOST_TEST(reasoning == message["reasoning_content"].get<std::string>());
  BOOST_TEST(content.empty());
  BOOST_TEST(name == "f");

  // A model that did not reason: reasoning_content null, the text all content. One whose prompt
  // left the reasoning open: all of an answer cut before </think> is reasoning.
  api::response_writer plain(endpoint::chat, "chatcmpl-r2", "m", 1, nullptr, false);
  plain.expect_reasoning({}, false);
  const json p = plain.full("Just 4.", {}, "stop", {3, 2});
  BOOST_TEST(p["choices"][0]["message"]["reasoning_content"].is_null());
  BOOST_TEST(p["choices"][0]["message"]["content"] == "Just 4.");
  api::response_writer open(endpoint::chat, "chatcmpl-r3", "m", 1, nullptr, false);
  open.expect_reasoning({}, true);
  const json o = open.full("Hmm, so", {}, "length", {3, 2});
  BOOST_TEST(o["choices"][0]["message"]["reasoning_content"] == "Hmm, so");
  BOOST_TEST(o["choices"][0]["message"]["content"] == "");
}

// echo puts the prompt's text first and, with logprobs, its tokens' (the first null) with
// offsets running through the prompt into the output; prompt_logprobs lists vLLM's shape.
BOOST_AUTO_TEST_CASE(echo_and_prompt_logprob_responses) {
  api::response_writer w(endpoint::completions, "cmpl-1", "m", 1, nullptr, true);
  w.expect_prompt({5, 6, 7}, "abc", true, true);
  sampling::token_logprobs a, b;
  a.logprob = -1.5f;
  a.rank = 2;
  a.top_ids = {9};
  a.top_logprobs = {-0.5f};
  b.logprob = -0.25f;
  b.rank = 1;
  b.top_ids = {7};
  b.top_logprobs = {-0.25f};
  w.prompt_scored({a, b});
  api::token_logprob out;
  out.id = 8;
  out.logprob = -2;
  const json full = w.full("d", {out}, "length", {3, 1});
  const json& c = full["choices"][0];
  BOOST_TEST(c["text"] == "abcd");
  BOOST_TEST(c["logprobs"]["token_logprobs"] == json({nullptr, -1.5, -0.25, -2.0}));
  BOOST_TEST(c["logprobs"]["tokens"].size() == 4u);
  BOOST_TEST(c["logprobs"]["top_logprobs"][0].is_null());
  BOOST_TEST(c["prompt_logprobs"][0].is_null());
  BOOST_TEST(c["prompt_logprobs"][1]["6"]["logprob"] == -1.5);
  BOOST_TEST(c["prompt_logprobs"][1]["6"]["rank"] == 2);
  BOOST_TEST(c["prompt_logprobs"][1]["9"]["rank"] == 1);
  BOOST_TEST(c["prompt_logprobs"][2].size() == 1u);  // the token is its own top 1
  // Streamed: the prompt's chunk first, then the output's.
  const auto chunks = w.chunks("d", {out}, std::nullopt);
  BOOST_TEST_REQUIRE(chunks.size() == 2u);
  BOOST_TEST(chunks[0]["choices"][0]["text"] == "abc");
  BOOST_TEST(chunks[0]["choices"][0]["prompt_logprobs"].size() == 3u);
  BOOST_TEST(chunks[1]["choices"][0]["text"] == "d");
  BOOST_TEST(w.chunks("e", {out}, std::nullopt).size() == 1u);
}

// Several choices: best_of keeps the n with the highest summed logprob per prompt, numbered
// prompt * n + rank; usage counts each prompt once and every generated token.
BOOST_AUTO_TEST_CASE(choices_merge_in_order_and_best_of_keeps_the_most_likely) {
  const api::choice_plan plan{2, 1, 3};
  BOOST_TEST(plan.size() == 6);
  BOOST_TEST(*plan.seed_of(std::uint64_t(10), 4) == 11u);  // prompt 1, draw 1
  BOOST_TEST(!plan.seed_of(std::nullopt, 4).has_value());
  std::vector<json> fulls;
  for (int k = 0; k < 6; ++k)
    fulls.push_back({{"id", "cmpl-1"}, {"choices", {{{"index", 0}, {"text", "t" + std::to_string(k)}}}},
                     {"usage", {{"prompt_tokens", 5}, {"completion_tokens", k}}}});
  const json out = api::merge_choices(plan, fulls, {-3, -1, -2, -0.5, -0.5, -9});
  BOOST_TEST_REQUIRE(out["choices"].size() == 2u);
  BOOST_TEST(out["choices"][0]["text"] == "t1");
  BOOST_TEST(out["choices"][1]["text"] == "t3");  // a tie: the earlier draw
  BOOST_TEST(out["choices"][1]["index"] == 1);
  BOOST_TEST(out["usage"]["prompt_tokens"] == 10);
  BOOST_TEST(out["usage"]["completion_tokens"] == 15);
  const json plain = api::merge_choices({1, 3, 3}, {fulls[0], fulls[1], fulls[2]}, {0, 0, 0});
  BOOST_TEST(plain["choices"][2]["text"] == "t2");
  BOOST_TEST(plain["choices"][2]["index"] == 2);
}

// Strict tools under "auto" (a Hermes-format model): free text, and calls that must be valid.
BOOST_AUTO_TEST_CASE(strict_tools_under_auto_constrain_hermes_calls) {
  const json msgs = {{{"role", "user"}, {"content", "x"}}};
  json loose = weather_tool();
  loose["function"]["name"] = "ping";
  const auto body = json{{"messages", msgs}, {"tools", {weather_tool(true), loose}}}.dump();
  auto r = api::parse_request(body, endpoint::chat);
  BOOST_TEST(r.tools.strict_auto());
  BOOST_TEST(r.params.constraint.empty());  // the frontend adds it once the model's format is known
  const auto c = api::strict_tool_constraint(r.tools, body);
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  BOOST_TEST(grammar_takes(c, "Let me look that up: a < b, <tool_ca is not a call."));
  BOOST_TEST(grammar_takes(c, "Checking. " + call + "\nDone, and " + call));
  BOOST_TEST(grammar_takes(c, "<tool_call>{\"name\": \"ping\", \"arguments\": {\"anything\": [1]}}</tool_call>"));
  BOOST_TEST(!grammar_takes(c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city
  BOOST_TEST(!grammar_takes(c, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  BOOST_TEST(!grammar_takes(c, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "));  // inside a call
  r = api::parse_request(json{{"messages", msgs}, {"tools", {weather_tool(true)}}, {"parallel_tool_calls", false}}.dump(), endpoint::chat);
  const auto one = api::strict_tool_constraint(r.tools, json{{"tools", {weather_tool(true)}}}.dump());
  BOOST_TEST(grammar_takes(one, "ok " + call + "\n"));
  BOOST_TEST(!grammar_takes(one, call + call));
  BOOST_TEST(!grammar_takes(one, call + " more text"));
}

// The same for models that write Mistral's [TOOL_CALLS] lists and Llama 3's whole-answer JSON.
BOOST_AUTO_TEST_CASE(strict_tools_under_auto_constrain_mistral_and_llama3_calls) {
  json loose = weather_tool();
  loose["function"]["name"] = "ping";
  const auto body = json{{"tools", {weather_tool(true), loose}}}.dump();
  auto r = api::parse_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", {weather_tool(true), loose}}}.dump(),
                              endpoint::chat);
  const auto m = api::strict_tool_constraint(r.tools, body, chat::tool_format::mistral);
  const std::string weather = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
  BOOST_TEST(grammar_takes(m, "Sure, [TOOL_CALLS is not a call."));
  BOOST_TEST(grammar_takes(m, "[TOOL_CALLS][" + weather + "]"));
  BOOST_TEST(grammar_takes(m, "Two: [TOOL_CALLS] [" + weather + ", {\"name\": \"ping\", \"arguments\": {}}] then text"));
  BOOST_TEST(!grammar_takes(m, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]"));  // city
  BOOST_TEST(!grammar_takes(m, "[TOOL_CALLS]{\"name\": \"ping\", \"arguments\": {}}"));  // not a list
  BOOST_TEST(!grammar_takes(m, "[TOOL_CALLS][" + weather));  // an open list is not complete
  BOOST_TEST(grammar_takes(m, "[TOOL_CALLS]  \n [" + weather + "]\n"));
  BOOST_TEST(!grammar_takes(m, "[TOOL_CALLS][" + weather + "     ]"));  // whitespace runs are bounded
  // Served: the answer keeps special tokens' text (Mistral's marker is one) and is constrained.
  sampling::sampling_params p;
  BOOST_TEST((api::answer_tool_format(r.tools, chat::tool_format::mistral, p, body) == chat::tool_format::mistral));
  BOOST_TEST(!p.skip_special_tokens);
  BOOST_TEST((p.constraint == m));
  sampling::sampling_params hermes;
  api::answer_tool_format(r.tools, chat::tool_format::hermes, hermes, body);
  BOOST_TEST(hermes.skip_special_tokens);
  // Granite 3.x: the same list behind <|tool_call|>, also a special token.
  const auto g = api::strict_tool_constraint(r.tools, body, chat::tool_format::granite);
  BOOST_TEST(grammar_takes(g, "Checking. <|tool_call|>[" + weather + "]"));
  BOOST_TEST(grammar_takes(g, "[TOOL_CALLS][{\"name\": \"nope\"}] is text here"));
  BOOST_TEST(!grammar_takes(g, "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {}}]"));
  sampling::sampling_params granite;
  BOOST_TEST((api::answer_tool_format(r.tools, chat::tool_format::granite, granite, body) == chat::tool_format::granite));
  BOOST_TEST(!granite.skip_special_tokens);
  BOOST_TEST((granite.constraint == g));
  // Pythonic calls have no grammar: strict tools under "auto" are a 400 naming tools, not ignored.
  sampling::sampling_params pythonic;
  BOOST_CHECK_EXCEPTION(api::answer_tool_format(r.tools, chat::tool_format::pythonic, pythonic, body), api::api_error,
                        [](const api::api_error& e) { return e.status() == 400 && e.param() == "tools" && std::string(e.what()).find("pythonic") != std::string::npos; });
  // DeepSeek: the name outside the JSON, as V3/R1 or as V3.1 writes it.
  const auto d = api::strict_tool_constraint(r.tools, body, chat::tool_format::deepseek_v3);
  const std::string B = "<｜tool▁calls▁begin｜>", E = "<｜tool▁calls▁end｜>", CB = "<｜tool▁call▁begin｜>",
                    CE = "<｜tool▁call▁end｜>", S = "<｜tool▁sep｜>";
  BOOST_TEST(grammar_takes(d, "Text first. " + B + CB + "function" + S + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + CE + "\n" +
                                  CB + "ping" + S + "{}" + CE + E));
  BOOST_TEST(!grammar_takes(d, B + CB + "function" + S + "get_weather\n```json\n{}\n```" + CE + E));  // city
  BOOST_TEST(!grammar_takes(d, B + CB + "nope" + S + "{}" + CE + E));  // no such tool
  BOOST_TEST(!grammar_takes(d, B + CB + "ping" + S + "{}" + CE));      // the block is open

  const auto l = api::strict_tool_constraint(r.tools, body, chat::tool_format::llama3_json);
  const std::string params = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  BOOST_TEST(grammar_takes(l, "It is sunny in {Paris} today."));  // text: '{' later is text
  BOOST_TEST(grammar_takes(l, "<|python_ta"));                    // stopped inside what could have been the tag
  BOOST_TEST(grammar_takes(l, "<b>bold</b>"));
  BOOST_TEST(grammar_takes(l, "  " + params));
  BOOST_TEST(grammar_takes(l, "<|python_tag|>" + params + "; {\"name\": \"ping\", \"parameters\": {}}\n"));
  BOOST_TEST(!grammar_takes(l, "{\"answer\": 42}"));            // an opening '{' is a call
  BOOST_TEST(!grammar_takes(l, "{\"name\": \"get_weather\", \"parameters\": {}}"));
  BOOST_TEST(!grammar_takes(l, params + " and then text"));
  const auto one = api::strict_tool_constraint(
      api::parse_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", {weather_tool(true)}},
                              {"parallel_tool_calls", false}}.dump(), endpoint::chat).tools,
      json{{"tools", {weather_tool(true)}}}.dump(), chat::tool_format::llama3_json);
  BOOST_TEST(grammar_takes(one, params));
  BOOST_TEST(!grammar_takes(one, params + ";" + params));
}
