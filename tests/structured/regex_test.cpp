// Regular expressions as byte DFAs: the same strings match as std::regex (ECMAScript, whole
// string) on every string over the pattern's alphabet up to a length, plus UTF-8 behaviour
// std::regex cannot judge, and every refusal names the problem and its offset.
#define BOOST_TEST_MODULE regex
#include <boost/test/unit_test.hpp>

#include <regex>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/structured/regex.h"
#include "tests/support/strings.h"

using namespace troupe;
using namespace troupe::structured;

namespace {

std::string refusal(const std::string& pattern, const regex_budget& budget = {}) {
  try {
    compile_regex(pattern, budget);
  } catch (const input_error& e) {
    return e.what();
  }
  return "compiled";
}

}  // namespace

BOOST_AUTO_TEST_CASE(matches_what_std_regex_matches) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ab*c", "abc"},           {"(ab|a)c?", "abc"},        {"[a-c]{2,3}", "abcd"},
      {"a{2}b{0,1}", "ab"},      {"(?:a|bc)+d", "abcd"},     {"\\d+(\\.\\d{1,2})?", "1.a"},
      {"[^a]b", "ab\n"},         {"\\w\\s\\W", "a _\n"},     {"^a*$", "ab"},
      {"(a|b)*abb", "ab"},       {"a{1,}b", "ab"},           {"[-a]+", "-ab"},
      {"x*?y", "xy"},            {".a", "a\nb"},             {"\\x41\\.", "A.b"},
      {"((a|)b)*", "ab"},        {"[\\d_]{2}", "1_a"},       {"a|", "ab"},
  };
  for (const auto& [pattern, alphabet] : cases) {
    const byte_dfa d = compile_regex(pattern);
    const std::regex ref(pattern, std::regex::ECMAScript);
    for (const auto& s : test::all_strings(alphabet, 6))
      BOOST_TEST(d.matches(s) == std::regex_match(s, ref), "pattern " << pattern << " on \"" << s << "\"");
  }
}

BOOST_AUTO_TEST_CASE(characters_are_utf8_sequences) {
  const byte_dfa dot = compile_regex("a.c");
  BOOST_TEST(dot.matches("a\xc3\xa9" "c"));        // é: two bytes, one character
  BOOST_TEST(dot.matches("a\xe2\x82\xac" "c"));    // €: three
  BOOST_TEST(dot.matches("a\xf0\x9f\x98\x80" "c"));  // an emoji: four
  BOOST_TEST(!dot.matches("a\xc3\xa9\xc3\xa9" "c"));
  BOOST_TEST(!dot.matches("a\xc3" "c"));           // half a character
  BOOST_TEST(!dot.matches("a\xc0\xaf" "c"));       // an overlong encoding
  BOOST_TEST(!dot.matches("a\xed\xa0\x80" "c"));   // a surrogate
  BOOST_TEST(!dot.matches("a\nc"));
  const byte_dfa lit = compile_regex("\xc3\xa9+");  // a quantifier repeats the whole character
  BOOST_TEST(lit.matches("\xc3\xa9\xc3\xa9"));
  BOOST_TEST(!lit.matches("\xc3\xa9\xa9"));
  const byte_dfa neg = compile_regex("[^a]");
  BOOST_TEST(neg.matches("\xe2\x82\xac"));
  BOOST_TEST(!neg.matches("a"));
  // Every state's refusals are what the token trie skips on: a dead byte is -1.
  BOOST_TEST(!compile_regex("a").step(compile_regex("a").start, 'b'));
}

BOOST_AUTO_TEST_CASE(what_is_not_supported_is_refused_by_name) {
  auto has = [](const std::string& pattern, const std::string& needle) {
    const std::string e = refusal(pattern);
    BOOST_TEST(e.find(needle) != std::string::npos, pattern << " -> " << e);
    BOOST_TEST(e.find("pattern: ") == 0, pattern << " -> " << e);
  };
  has("(a)\\1", "the escape \\1 is not supported at offset 4");
  has("(?=a)", "lookaround and named groups are not supported");
  has("(?<n>a)", "lookaround and named groups are not supported");
  has("\\bword", "the escape \\b is not supported");
  has("a++", "possessive quantifiers are not supported");
  has("(ab", "missing ')'");
  has("ab)", "unbalanced ')'");
  has("[ab", "missing ']' at offset 0");
  has("[z-a]", "a class range runs backwards");
  has("[\xc3\xa9]", "non-ASCII characters in a class are not supported");
  has("*a", "'*' has nothing to repeat");
  has("a^b", "'^' is only supported at the pattern's ends");
  has("a{3,2}", "the bound is below the count");
  // A count of more digits than a quantifier was read with came back as literal text (HTTP 200
  // with the braces in the answer): every digit is read, and a count past the budget refused.
  has("a{2147483647}", "the repetition count 2147483647 is above 100000");
  has("a{1,99999999999999999999999}", "the repetition count 99999999999999999999... is above 100000");
  has("a{100001}", "the repetition count 100001 is above 100000");
  has("\\xzz", "\\x needs two hex digits");
  has("a\\x4", "\\x needs two hex digits");
  has("a\\", "a pattern cannot end in '\\'");
  has("[a-\\", "a pattern cannot end in '\\'");
  has("a" + std::string(100000, '?'), "quantifiers stacked deeper than 100");
  has(std::string(200, '(') + std::string(200, ')'), "groups nested deeper than 100");
  // Bombs: counted repetition past the NFA budget, and a pattern whose DFA grows exponentially.
  has("(a{1000}){1000}", "its automaton passes 100000 states");
  // (a|b)*a(a|b){n} needs 2^(n+1) DFA states; the state budget stops it, and the work budget
  // (counted, not timed: the answer cannot depend on the machine's load) stops a pattern whose
  // states are few but large.
  regex_budget small;
  small.max_dfa_states = 500;
  const std::string e = refusal("(a|b)*a(a|b){20}", small);
  BOOST_TEST(e.find("pattern: its automaton passes 500 DFA states") == 0, e);
  regex_budget little_work;
  little_work.max_work = 1000;
  BOOST_TEST(refusal("(a|b)*a(a|b){5}", little_work).find("pattern: building its automaton passes the work budget of 1000 steps") == 0,
             refusal("(a|b)*a(a|b){5}", little_work));
  BOOST_TEST(refusal("(a|b)*a(a|b){5}") == "compiled");
  BOOST_TEST(refusal("a{2,}") == "compiled");
  BOOST_TEST(refusal("x{,3}") == "compiled");  // not a quantifier: literal text, as ECMAScript reads it
}
