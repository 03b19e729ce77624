// The chat template renderer against Debian's python3-jinja2 (configured as Hugging Face
// configures it) on the real templates of Llama 3, Llama 3.2, Qwen2.5, Qwen3, Gemma 3, DeepSeek V3
// and Mistral Nemo (from the tokenizer packages the tokenizer tests use), Qwen2, Llama 3.1 and
// Mistral v0.1/v0.3 (tests/chat/templates), the synthesized model's, and the 95 templates that
// real GGUF files carry (tests/chat/shipped_templates.mjs), over conversations with a system
// prompt, several turns, empty content, unicode and tool calls.
#define BOOST_TEST_MODULE chat_template
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <fstream>
#include <filesystem>
#include <sstream>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/jinja.h"
#include "runtime/chat/tool_calls.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/synth_vocab.h"
#include "tests/support/process.h"

using namespace troupe;
using json = nlohmann::json;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(in.good(), "cannot read " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string src(const std::string& rel) { return std::string(TROUPE_SOURCE_DIR) + "/" + rel; }

std::map<std::string, std::string> templates() {
  const std::string npm = "tests/tokenizer/reference/node_modules/@lenml/";
  std::map<std::string, std::string> t;
  t["llama3"] = json::parse(read(src(npm + "tokenizer-llama3/models/tokenizer_config.json")))["chat_template"];
  t["qwen3"] = json::parse(read(src(npm + "tokenizer-qwen3/models/tokenizer_config.json")))["chat_template"];
  for (const char* pkg : {"llama3_2", "qwen2_5", "gemma3", "deepseek_v3", "mistral_nemo"})
    t[pkg] = json::parse(read(src(npm + "tokenizer-" + pkg + "/models/tokenizer_config.json")))["chat_template"];
  t["qwen2"] = read(src("tests/chat/templates/qwen2.jinja"));
  t["llama-3.1"] = read(src("tests/chat/templates/llama-3.1.jinja"));
  t["mistral-v0.1"] = read(src("tests/chat/templates/mistral-v0.1.jinja"));
  t["mistral-v0.3"] = read(src("tests/chat/templates/mistral-v0.3.jinja"));
  t["kjv"] = json::parse(read(src("models/kjv/tokenizer_config.json")))["chat_template"];
  t["synth"] = json::parse(tokenizer::synth_tokenizer_config_json(512))["chat_template"];
  return t;
}

std::vector<json> conversations() {
  auto msg = [](const char* role, const std::string& content) { return json{{"role", role}, {"content", content}}; };
  return {
      json::array({msg("user", "Hello!")}),
      json::array({msg("system", "You are terse."), msg("user", "What is 2+2?")}),
      json::array({msg("user", "Hi"), msg("assistant", "Hello, how can I help?"), msg("user", "Tell me a joke.")}),
      json::array({msg("system", "Be kind."), msg("user", "one"), msg("assistant", "  two  "), msg("user", "three"),
                   msg("assistant", "four"), msg("user", "five")}),
      json::array({msg("user", "")}),
      json::array({msg("system", ""), msg("user", "  padded\n\n"), msg("assistant", ""), msg("user", "x")}),
      json::array({msg("user", "Grüße aus Köln — 你好，世界 🌍🚀 e\u0301 ﬁ")}),
      json::array({msg("user", "Think first."), msg("assistant", "<think>\nhmm\n</think>\n\nThe answer is 4."),
                   msg("user", "Again?")}),
      json::array({msg("user", "quotes ' \" and {{ braces }} and {% tags %}"), msg("assistant", "ok\n")}),
      json::array({msg("assistant", "I start?"), msg("user", "no")}),  // Mistral refuses this
      // A tool call and its result (content "" as OpenAI clients send it with tool_calls).
      json::array({msg("user", "Weather in Paris?"),
                   {{"role", "assistant"}, {"content", ""},
                    {"tool_calls", {{{"id", "call00001"}, {"type", "function"},
                                     {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
                   {{"role", "tool"}, {"content", "18C and sunny"}, {"tool_call_id", "call00001"}},
                   msg("user", "Thanks!")}),
  };
}

// Renders every case with python3-jinja2.
json reference(const json& cases) {
  const std::string in_path = std::string(TROUPE_BINARY_DIR) + "/chat_template_cases.json";
  std::ofstream(in_path) << cases.dump();
  const auto r = test::run_command("/usr/bin/python3 " + src("tests/chat/render_reference.py") + " < " + in_path);
  BOOST_TEST_REQUIRE(r.status == 0, "render_reference.py failed: " << r.output);
  return json::parse(r.output);
}

json weather_tools() {
  return json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "Weather in a city"},
                       {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
}

// Renders every case here and with python3-jinja2: the same text, the same raise_exception
// message, or (where jinja2 itself fails on the template or its context) an error here too.
// Returns how many rendered and how many the template refused.
std::pair<int, int> compare_with_jinja2(const json& cases, const std::vector<std::string>& names) {
  const json ref = reference(cases);
  BOOST_TEST_REQUIRE(ref.size() == cases.size());
  int rendered = 0, refused = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::string got, err;
    bool failed = false;
    try {
      got = chat::jinja_template(cases[i]["template"]).render(cases[i]["context"]);
    } catch (const chat::template_raised& e) {
      err = e.what();
    } catch (const chat::template_error& e) {
      failed = true;
      err = e.what();
    }
    if (ref[i].contains("failed")) {
      BOOST_TEST(failed, names[i] << " case " << i << ": jinja2 failed (" << ref[i]["failed"].get<std::string>() << "), Troupe gave "
                                  << (err.empty() ? got : err));
    } else if (ref[i].contains("error")) {
      ++refused;
      BOOST_TEST(err == ref[i]["error"].get<std::string>(), names[i] << " case " << i);
    } else {
      ++rendered;
      BOOST_TEST(err.empty(), names[i] << " case " << i << " raised: " << err);
      BOOST_TEST(got == ref[i]["text"].get<std::string>(), names[i] << " case " << i << "\n--- ours:\n" << got
                                                                    << "\n--- jinja2:\n" << ref[i]["text"].get<std::string>());
    }
  }
  return {rendered, refused};
}

}  // namespace

BOOST_AUTO_TEST_CASE(renders_the_named_templates_exactly_as_python_jinja2) {
  json cases = json::array();
  std::vector<std::string> names;
  for (const auto& [name, tmpl] : templates())
    for (const auto& conv : conversations())
      for (bool gen : {true, false}) {
        json ctx = {{"messages", conv}, {"add_generation_prompt", gen}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
        if (name == "qwen3" && gen) ctx["enable_thinking"] = false;
        if ((name == "llama-3.1" || name == "qwen3" || name == "mistral-v0.3" || name == "kjv" || name == "llama3_2" ||
             name == "qwen2_5" || name == "mistral_nemo") && !gen)  // the tools paths too
          ctx["tools"] = weather_tools();
        cases.push_back({{"template", tmpl}, {"context", ctx}});
        names.push_back(name);
      }
  const auto [rendered, refused] = compare_with_jinja2(cases, names);
  BOOST_TEST_MESSAGE(rendered << " renders and " << refused << " refusals equal python3-jinja2's");
  BOOST_TEST(refused > 0);  // Mistral's alternation check ran
}

// The templates real GGUF files carry, about a hundred families' (tests/chat/shipped_templates.mjs:
// the npm package @huggingface/ollama-utils ships them): each renders as python3-jinja2 renders
// it, on every conversation above, with tools where no generation prompt is asked for.
BOOST_AUTO_TEST_CASE(renders_the_templates_gguf_files_ship_exactly_as_python_jinja2) {
  const std::string path = std::string(TROUPE_BINARY_DIR) + "/shipped_templates.json";
  const auto made = test::run_command("node " + src("tests/chat/shipped_templates.mjs") + " " + path + " 2>&1");
  BOOST_TEST_REQUIRE(made.status == 0, "run scripts/install-deps.sh first: " << made.output);
  const json shipped = json::parse(read(path));
  BOOST_TEST_REQUIRE(shipped.size() >= 90u);
  json cases = json::array();
  std::vector<std::string> names;
  for (const auto& [name, tmpl] : shipped.items())
    for (const auto& conv : conversations())
      for (bool gen : {true, false}) {
        json ctx = {{"messages", conv}, {"add_generation_prompt", gen}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
        if (!gen) ctx["tools"] = weather_tools();
        cases.push_back({{"template", tmpl}, {"context", ctx}});
        names.push_back(name);
      }
  // The tool-call format each family's template shows (runtime/chat/tool_calls.h).
  const std::map<std::string, chat::tool_format> formats = {
      {"qwen3:0.6b", chat::tool_format::hermes},      {"qwen2.5:0.5b", chat::tool_format::hermes},
      {"granite4:latest", chat::tool_format::hermes}, {"granite3.3:2b", chat::tool_format::granite},
      {"granite3.2:8b", chat::tool_format::granite},  {"granite3-dense:2b", chat::tool_format::granite},
      {"llama3.1:8b", chat::tool_format::llama3_json}, {"llama3.2:3b", chat::tool_format::llama3_json},
      {"deepseek-r1:8b", chat::tool_format::deepseek_v3}, {"deepseek-v3:671b", chat::tool_format::deepseek_v3},
      {"deepseek-v3.1:latest", chat::tool_format::deepseek_v3}, {"gemma3:1b", chat::tool_format::none}};
  for (const auto& [model, format] : formats) {
    BOOST_TEST_REQUIRE(shipped.contains(model), model);
    BOOST_TEST(chat::tool_format_name(chat::infer_tool_format(shipped[model].get<std::string>())) == std::string(chat::tool_format_name(format)), model);
  }
  const auto [rendered, refused] = compare_with_jinja2(cases, names);
  BOOST_TEST_MESSAGE(shipped.size() << " templates: " << rendered << " renders and " << refused << " refusals equal python3-jinja2's");
}

BOOST_AUTO_TEST_CASE(language_features_match_python_jinja2) {
  // Small templates for what the model templates above do not all reach.
  const std::vector<std::string> snippets = {
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 1e3 }}",
      "{{ [1, 'a', none, true, 2.5] }} {{ {'k': [1, {'x': 'y'}]} | tojson }} {{ {'k': 1} | tojson(indent=2) }}",
      "{{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'abc'[::-1] }} {{ 'héllo'[1:3] }}",
      "{% for k, v in d.items() %}{{ loop.index }}:{{ k }}={{ v }}{% if not loop.last %}, {% endif %}{% endfor %}",
      "{% for x in xs if x > 1 %}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
      "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% set local = x %}{% endfor %}{{ ns.n }}{{ local is defined }}",
      "{{ 'yes' if xs|length > 2 else 'no' }} {{ xs | select('odd') | list }} {{ xs | reject('even') | join('-') }}",
      "{{ d.missing is defined }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ undefined_thing | default('D') }}",
      "{{ 'Hello' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ 'b' in 'abc' }} {{ 3 not in xs }} {{ 'x'.upper() }}{{ 'MiXed'.lower() }}",
      "  {% if true %}\n    indented\n  {% endif %}\n{{- ' trimmed' }}  {#- comment -#}  end\n",
      "{{ xs[-1] }} {{ xs[1:-1] }} {{ (xs | first) + (xs | last) }} {{ 'a\\tb\\n' | tojson }} {{ '  pad ' | trim }}|",
      "{{ users | selectattr('admin') | map(attribute='name') | join(', ') }} {{ users | rejectattr('admin', 'equalto', true) | list | length }}",
      // Llama 3.2's date line: the global functions are defined (and callable) without being called.
      "{{ strftime_now is defined }} {{ raise_exception is callable }} {{ no_such_function is defined }} {{ xs is callable }}",
      // Macros (Command R7B's and Qwen3-Coder's templates define them).
      "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('ann') }} {{ greet('bob', greeting='Hi') }} "
      "{{ greet(greeting='Yo', name='cy') }} {{ greet is callable }}",
      "{% macro inner(x) %}[{{ x }}]{% endmacro %}{% macro outer(xs) %}{% for x in xs %}{{ inner(x) }}{% endfor %}{% endmacro %}"
      "{{ outer(xs) | length }} {{ outer(xs) }}",
      "{% set top = 'T' %}{% macro sees() %}{{ top }}{{ x is defined }}{% endmacro %}{% for x in xs %}{{ sees() }}{% endfor %}",
      "{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}",
      "{% set ns = namespace(v=0) %}{% macro bump() %}{% set ns.v = ns.v + 1 %}{% set local = 1 %}{% endmacro %}{{ bump() }}{{ bump() }}"
      "{{ ns.v }}{{ local is defined }}",
      "{% macro m(a, b=a ~ '!') %}{{ a is defined }}{{ b }}{% endmacro %}{{ m() }}|{{ m('x') }}",
  };
  json ctx = {{"xs", {1, 2, 3, 4, 5}}, {"d", {{"a", 1}, {"b", "two"}}},
              {"users", {{{"name", "ann"}, {"admin", true}}, {{"name", "bob"}, {"admin", false}}}}};
  json cases = json::array();
  for (auto& s : snippets) cases.push_back({{"template", s}, {"context", ctx}});
  const json ref = reference(cases);
  for (std::size_t i = 0; i < snippets.size(); ++i) {
    BOOST_TEST_REQUIRE(ref[i].contains("text"), snippets[i] << ": jinja2 refused it: " << ref[i].dump());
    BOOST_TEST(chat::jinja_template(snippets[i]).render(ctx) == ref[i]["text"].get<std::string>(), "snippet " << i << ": " << snippets[i]);
  }
}

BOOST_AUTO_TEST_CASE(bad_templates_and_values_are_errors_naming_the_line) {
  auto message_of = [](const std::string& t, const json& ctx = json::object()) -> std::string {
    try {
      chat::jinja_template(t).render(ctx);
    } catch (const chat::template_error& e) {
      return e.what();
    }
    return "no error";
  };
  BOOST_TEST(message_of("a\n{% if x %}") .find("missing {% endif %}") != std::string::npos);
  BOOST_TEST(message_of("\n\n{{ x + }}").find("line 3") == 0, message_of("\n\n{{ x + }}"));
  BOOST_TEST(message_of("{% call m() %}{% endcall %}").find("unsupported statement 'call'") != std::string::npos);
  BOOST_TEST(message_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("macro 'm' takes not more than 1 argument(s)") != std::string::npos);
  BOOST_TEST(message_of("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}").find("macro 'm' takes no keyword argument 'b'") != std::string::npos);
  // A macro calling itself without end is stopped, not left to exhaust the stack.
  BOOST_TEST(message_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("macros called more than 64 deep") != std::string::npos,
             message_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"));
  BOOST_TEST(message_of("{{ x.y }}").find("'x' is undefined") != std::string::npos, message_of("{{ x.y }}"));
  BOOST_TEST(message_of("{{ 1 + 'a' }}").find("unsupported operand") != std::string::npos);
  BOOST_TEST(message_of("{{ x | frobnicate }}").find("unknown filter 'frobnicate'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(chat_template_loads_from_a_model_folder) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/chat-template-folder";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer_config.json") << tokenizer::synth_tokenizer_config_json(512);
  auto t = chat::chat_template::load(dir);
  BOOST_TEST_REQUIRE(t.has_value());
  const std::string p = t->render(json::array({{{"role", "user"}, {"content", "hi"}}}), true);
  BOOST_TEST(p == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{% if %}"})";
  try {
    chat::chat_template::load(dir);
    BOOST_FAIL("a broken template was accepted");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("tokenizer_config.json: chat_template: line 1") != std::string::npos, e.what());
  }
}

// A template in chat_template.jinja was not read, and none could be given instead.
BOOST_AUTO_TEST_CASE(chat_template_jinja_and_an_override_file_are_read) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/chat-template-jinja-folder";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer_config.json") << tokenizer::synth_tokenizer_config_json(512);
  std::ofstream(dir + "/chat_template.jinja") << "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}";
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto t = chat::chat_template::load(dir);
  BOOST_TEST_REQUIRE(t.has_value());
  BOOST_TEST(t->render(msgs, true) == "<|begin_of_text|>[user] hi");  // the .jinja file wins; bos from the config
  const std::string over = dir + "/override.jinja";
  std::ofstream(over) << "{% for m in messages %}{{ m.content | upper }}{% endfor %}";
  BOOST_TEST(chat::chat_template::load(dir, over)->render(msgs, true) == "HI");
  BOOST_CHECK_THROW(chat::chat_template::load(dir, dir + "/missing.jinja"), input_error);
}
