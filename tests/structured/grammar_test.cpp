// The grammar engine and GBNF: GBNF grammars that describe regular languages accept exactly the
// strings std::regex accepts for the same language (every string over the alphabet up to a
// length); recursion, repetition bounds, UTF-8 classes; grammar errors name the rule or the
// line and column; token masks equal a token-by-token check, with EOS exactly in complete states.
#define BOOST_TEST_MODULE grammar
#include <boost/test/unit_test.hpp>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/structured/gbnf.h"
#include "runtime/structured/grammar.h"
#include "runtime/structured/token_masks.h"
#include "tests/support/strings.h"

using namespace troupe;
using namespace troupe::structured;

namespace {

bool matches(const std::shared_ptr<const grammar>& g, const std::string& s) {
  grammar_matcher m(g);
  return m.accept(s) && m.complete();
}

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(regular_gbnf_grammars_accept_what_std_regex_accepts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"root ::= (\"ab\" | \"c\")* \"d\"", "(ab|c)*d"},
      {"root ::= [a-c]+ \"-\"? [b]{2,3}", "[a-c]+-?b{2,3}"},
      {"root ::= x x?\nx ::= \"a\" | \"b\" \"c\"", "(a|bc)(a|bc)?"},
      {"root ::= [^a] \"b\"{0,2}", "[^a]b{0,2}"},
      {"root ::= ( [ab] [c] | \"d\" )+ # comment\n", "([ab]c|d)+"},
      {"root ::= \"a\" (\"b\" | )\n  \"c\"? ", "ab?"},  // a rule ends at the line's end: the indented line is not part of it
  };
  for (const auto& [gbnf, re] : cases) {
    if (gbnf.find("\n  \"c\"") != std::string::npos) {
      BOOST_CHECK_NE(error_of(gbnf), "");  // "c"? on its own line is not a rule
      continue;
    }
    const auto g = parse_gbnf(gbnf);
    const std::regex r(re);
    for (const auto& s : test::all_strings("abcd-", 6)) BOOST_CHECK_MESSAGE(matches(g, s) == std::regex_match(s, r), gbnf << " on '" << s << "'");
  }
}

BOOST_AUTO_TEST_CASE(recursion_nests_to_any_depth_and_right_recursion_does_not_grow_the_stack) {
  const auto g = parse_gbnf("root ::= \"(\" root \")\" | \"x\"\n");
  BOOST_CHECK(matches(g, "x"));
  BOOST_CHECK(matches(g, "((((x))))"));
  BOOST_CHECK(!matches(g, "((x)"));
  BOOST_CHECK(!matches(g, "(x))"));
  // a*, as a right-recursive rule: a million bytes, one stack of constant depth.
  const auto star = parse_gbnf("root ::= \"a\" root | \"b\"");
  grammar_matcher m(star);
  for (int i = 0; i < 100000; ++i) BOOST_REQUIRE(m.accept('a'));
  BOOST_CHECK_EQUAL(m.stacks().size(), 2u);  // one per alternative: "a" root, "b"
  for (const auto& s : m.stacks()) BOOST_CHECK_LE(s.size(), 1u);
  BOOST_CHECK(!m.complete());
  BOOST_CHECK(m.accept('b'));
  BOOST_CHECK(m.complete());
  BOOST_CHECK(m.exhausted());
}

BOOST_AUTO_TEST_CASE(utf8_classes_and_dot_match_whole_characters) {
  const auto g = parse_gbnf("root ::= [α-ω]+ . [^\"\\\\]");
  BOOST_CHECK(matches(g, "αβγ!x"));
  BOOST_CHECK(matches(g, "ω€é"));    // . and [^...] take multi-byte characters
  BOOST_CHECK(matches(g, "α😀\x7f"));
  BOOST_CHECK(!matches(g, "a!x"));   // a is not in α-ω
  BOOST_CHECK(!matches(g, "α!\""));  // excluded
  BOOST_CHECK(!matches(g, "α\xce"));  // a lone lead byte is not a character
  BOOST_CHECK(!matches(g, std::string("α!\xed\xa0\x80")));  // an encoded surrogate
}

BOOST_AUTO_TEST_CASE(grammar_errors_name_the_rule_or_the_place) {
  BOOST_CHECK_NE(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"").find("'expr' is left-recursive"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= a\na ::= b? root\nb ::= \"x\"").find("left-recursive"), std::string::npos);  // through a nullable prefix
  BOOST_CHECK_NE(error_of("root ::= missing").find("'missing' is used but never defined"), std::string::npos);
  BOOST_CHECK_NE(error_of("x ::= \"a\"").find("no 'root' rule"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("'root' is defined twice"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= \"a\n").find("line 1"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= \"a\"\nx ::= [a-").find("line 2"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= \"\\q\"").find("unknown escape \\q"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= [z-a]").find("backwards"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= \"a\"{3,2}").find("below its minimum"), std::string::npos);
  BOOST_CHECK_NE(error_of("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')).find("nested deeper"), std::string::npos);
  // A grammar too large for the budget is refused while it is built, not after. (Nested
  // repetitions of groups stay small: a group is one reference however often it repeats.)
  BOOST_CHECK_NE(error_of("root ::= \"abcdefghij\"{100000}").find("too large"), std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_failed_accept_leaves_the_matcher_as_it_was) {
  const auto g = parse_gbnf("root ::= \"abc\" | \"abd\"");
  grammar_matcher m(g);
  BOOST_CHECK(m.accept("ab"));
  const std::string before = m.key();
  BOOST_CHECK(!m.accept("ce"));  // c is fine, e is not: nothing of it stays
  BOOST_CHECK_EQUAL(m.key(), before);
  BOOST_CHECK(m.accept("d"));
  BOOST_CHECK(m.complete());
}

BOOST_AUTO_TEST_CASE(after_is_a_copy_that_accepted_and_leaves_the_matcher_as_it_was) {
  const auto g = parse_gbnf("root ::= item+\nitem ::= \"ab\" | \"a\" [b-d] \"!\"");
  grammar_matcher m(g);
  BOOST_REQUIRE(m.accept("ab"));
  const std::string before = m.key();
  for (const std::string bytes : {"", "a", "ab", "ac!", "ab!ab", "ae", "x", "ab!a!"}) {
    grammar_matcher copy = m;
    const bool took = copy.accept(bytes);
    const auto next = m.after(bytes);
    BOOST_CHECK_MESSAGE(next.has_value() == took, "'" << bytes << "'");
    if (next && took) {
      BOOST_CHECK_EQUAL(next->key(), copy.key());
      BOOST_CHECK_EQUAL(next->complete(), copy.complete());
    }
    BOOST_CHECK_EQUAL(m.key(), before);
  }
}

BOOST_AUTO_TEST_CASE(token_masks_equal_a_token_by_token_check_with_eos_only_where_complete) {
  std::mt19937 rng(7);
  std::vector<std::string> tokens{"", "", "a", "b", "ab", "ba", "(", ")", "()", "((", "))", "x", "ax", "xa", "(a", "a)", "abab"};
  for (int i = 0; i < 200; ++i) {  // random tokens over the grammar's bytes and some others
    std::string t;
    const int n = 1 + int(rng() % 5);
    for (int j = 0; j < n; ++j) t += "ab()xz"[rng() % 6];
    tokens.push_back(t);
  }
  const std::vector<std::int32_t> eos{0};
  auto vocab = std::make_shared<vocabulary>(tokens, eos);
  masks cache(vocab);
  const auto g = parse_gbnf("root ::= item+\nitem ::= \"(\" root? \")\" | [ab]+ \"x\"?");
  grammar_matcher m(g);
  std::string text;
  for (int step = 0; step < 60; ++step) {
    const auto mask = cache.of(m);
    std::vector<std::int32_t> allowed;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      bool want;
      if (id == 0) want = m.complete();
      else if (tokens[id].empty()) want = false;
      else {
        grammar_matcher copy = m;
        want = copy.accept(tokens[id]);
      }
      BOOST_REQUIRE_MESSAGE(mask->test(id) == want, "token " << id << " '" << tokens[id] << "' after '" << text << "'");
      if (want && id != 0) allowed.push_back(std::int32_t(id));
    }
    BOOST_REQUIRE(!allowed.empty());
    const auto pick = allowed[rng() % allowed.size()];
    BOOST_REQUIRE(m.accept(tokens[std::size_t(pick)]));
    text += tokens[std::size_t(pick)];
  }
  const auto s = cache.stats();
  BOOST_CHECK_EQUAL(s.hits + s.misses, 60u);
  BOOST_CHECK_GT(s.hits, 0u);  // the walk revisits states: the cache answers
}
