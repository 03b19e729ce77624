// A chat template is code from a model folder: each render runs under a budget of steps and
// output, parsing and values are bounded in depth, and integer arithmetic cannot overflow.
// A template past a bound fails its own render with a message, never the process.
#define BOOST_TEST_MODULE jinja_limits
#include <boost/test/unit_test.hpp>

#include "runtime/chat/jinja.h"

using namespace troupe::chat;
using json = nlohmann::json;

namespace {

// The error a template gives (parse or render), or "rendered".
std::string outcome(const std::string& src, const json& ctx = json::object(), render_limits lim = {}) {
  try {
    jinja_template t(src);
    t.render(ctx, lim);
    return "rendered";
  } catch (const template_error& e) {
    return e.what();
  }
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(loops_past_the_step_budget_fail_the_render) {
  // range(100000000) used to build a 100M-element list (RSS +0.5 GB/s) on the frontend's thread.
  BOOST_TEST(outcome("{% for i in range(100000000) %}x{% endfor %}") ==
             "the template ran past its budget of 1000000 steps");
  BOOST_TEST(has(outcome("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}"),
                 "budget"));
  render_limits small;
  small.max_steps = 50;
  BOOST_TEST(outcome("{% for i in range(40) %}{{ i }}{% endfor %}", {}, small) == "the template ran past its budget of 50 steps");
  BOOST_TEST(outcome("{% for i in range(10) %}{{ i }}{% endfor %}", {}, small) == "rendered");
}

// `list` and `join` over range(900000) stayed inside the step budget (range() counted its
// items, the filters nothing) and took 5.6 s a request; with 8 at once /health timed out.
BOOST_AUTO_TEST_CASE(the_work_of_filters_and_methods_counts_against_the_budget) {
  BOOST_TEST(has(outcome("{{ range(900000)|list|length }}"), "budget of 1000000 steps"));
  BOOST_TEST(has(outcome("{{ range(600000)|join(',') }}"), "budget of 1000000 steps"));
  BOOST_TEST(has(outcome("{{ ','.join(range(600000)|map('string')) }}"), "budget"));
  BOOST_TEST(has(outcome("{{ range(3000)|unique|length }}"), "budget"), outcome("{{ range(3000)|unique|length }}"));  // 4.5 M comparisons
  render_limits lim;
  lim.max_output = 1000;
  BOOST_TEST(has(outcome("{% set x = range(500)|join('--') %}", {}, lim), "past the limit"));  // built, never output
  BOOST_TEST(outcome("{{ range(1000)|list|join(',')|length }}") == "rendered");  // small ones still work
}

BOOST_AUTO_TEST_CASE(strings_and_output_past_the_limit_fail_the_render) {
  BOOST_TEST(has(outcome("{{ 'a' * 10000000000 }}"), "past the limit"));
  BOOST_TEST(has(outcome("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
                 "past the limit"));
  render_limits lim;
  lim.max_output = 1000;
  BOOST_TEST(outcome("{% for i in range(600) %}ab{% endfor %}", {}, lim) ==
             "the template's output passed the limit of 1000 bytes");
}

BOOST_AUTO_TEST_CASE(nesting_is_bounded_in_templates_and_values) {
  BOOST_TEST(has(outcome("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), "a tag of more than 1024 tokens"));
  BOOST_TEST(has(outcome("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}"), "nested deeper than 64"));
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if true %}";
  BOOST_TEST(has(outcome(blocks), "blocks nested deeper than 64"));
  // Values: from the request (JSON) and built by the template.
  json deep = json::array();
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  BOOST_TEST(has(outcome("{{ x | length }}", {{"x", deep}}), "values nested deeper than 256"));
  BOOST_TEST(has(outcome("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
                 "values nested deeper than 256"));
  // A namespace stored in itself would be a cycle: printing it recursed without end.
  BOOST_TEST(has(outcome("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}{{ ns }}"), "cannot store a namespace"));
}

BOOST_AUTO_TEST_CASE(integer_overflow_is_an_error_not_undefined_behaviour) {
  BOOST_TEST(has(outcome("{{ 9223372036854775807 + 1 }}"), "integer overflow in +"));
  BOOST_TEST(has(outcome("{{ 4611686018427387904 * 4 }}"), "integer overflow in *"));
  BOOST_TEST(has(outcome("{{ 10 ** 30 }}"), "integer overflow in **"));
  BOOST_TEST(has(outcome("{{ (-9223372036854775807 - 1) // -1 }}"), "integer overflow"));
  BOOST_TEST(outcome("{{ 2 ** 62 + (2 ** 62 - 1) + 2 ** 62 }}") != "rendered");
}

BOOST_AUTO_TEST_CASE(real_templates_stay_far_inside_the_budget) {
  // A 200-message conversation through a Llama-3-like loop: well under the default budget.
  json msgs = json::array();
  for (int i = 0; i < 200; ++i) msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'w')}});
  const std::string src =
      "{% for m in messages %}{{ '<|start|>' + m['role'] + '\\n\\n' + m['content'] | trim + '<|eot|>' }}{% endfor %}";
  BOOST_TEST(outcome(src, {{"messages", msgs}}) == "rendered");
}

// Found by the fuzzer: literals the tokenizer could not convert escaped as std::out_of_range and
// std::invalid_argument, which nothing above expected (the server's load ended as an internal error).
BOOST_AUTO_TEST_CASE(bad_literals_are_template_errors) {
  BOOST_TEST(has(outcome("{{ 99999999999999999999999 }}"), "integer literal 99999999999999999999999 is out of range"));
  BOOST_TEST(has(outcome("{{ '\\uzzzz' }}"), "bad escape in string"));
  BOOST_TEST(outcome("{{ 1e999 }}") == "rendered");  // a float past the range is inf, as in Python
}
