// Masks assembled from fragments equal masks of the whole state walked, over the JSON Schema
// corpus and random outputs of each schema; fragments are shared between grammars (a new schema
// finds what earlier ones walked), and strings bounded past the longest token share theirs.
#define BOOST_TEST_MODULE fragment
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/structured/constraint.h"
#include "runtime/structured/fragment.h"
#include "runtime/structured/gbnf.h"
#include "runtime/structured/json_schema.h"
#include "runtime/structured/token_masks.h"

using namespace troupe;
using namespace troupe::structured;
using json = nlohmann::json;

namespace {

// A vocabulary of what JSON outputs are made of, in the pieces a BPE cuts them into: single
// bytes, punctuation runs ('",', '"}', ': "'), words with and without a leading space, numbers,
// escapes and multi-byte characters, whole and cut. Id 0 is EOS, id 1 another special token.
std::vector<std::string> json_vocabulary() {
  std::vector<std::string> v{"", ""};
  for (int b = 32; b < 127; ++b) v.push_back(std::string(1, char(b)));
  for (const char* t : {"\",", "\"}", "\":", "\": ", ": \"", "\"]", "},", "}}", "],", "{\"", "[\"", "[{", "\", \"", ",\n", "\n",
                        "  ", "    ", "\\n", "\\\"", "\\u00", "\\\\", "true", "false", "null", "12", "2024", "-0", ".5", "e1", "E+",
                        "0.", "é", "\xc3", "\xa9", "漢", "\xe6\xbc", "😀", "http", "://", "@", ".com", "T12", ":00", "Z\"", "-01"})
    v.push_back(t);
  std::mt19937 rng(11);
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
  for (int i = 0; i < 400; ++i) {
    std::string w = (i % 2) ? " " : "";
    const int n = 2 + int(rng() % 7);
    for (int j = 0; j < n; ++j) w += letters[rng() % letters.size()];
    if (i % 9 == 0) w += "\"";
    v.push_back(w);
  }
  return v;
}

std::vector<std::string> corpus_schemas() {
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/tests/structured/corpus/schemas.json");
  const json corpus = json::parse(in);
  std::vector<std::string> out;
  for (const auto& e : corpus) out.push_back(e.at("schema").dump());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(assembled_masks_equal_the_whole_walk_over_the_corpus) {
  const auto vocab = std::make_shared<vocabulary>(json_vocabulary(), std::vector<std::int32_t>{0});
  grammar_cache grammars(vocab);  // one fragment cache for every schema, as an engine has
  const auto schemas = corpus_schemas();
  BOOST_TEST_REQUIRE(schemas.size() >= 200u);
  std::mt19937 rng(3);
  std::uint64_t assembled = 0, compared = 0;
  for (std::size_t i = 0; i < schemas.size(); i += 3) {  // a third of the corpus: every keyword is there
    BOOST_TEST_CONTEXT("schema " << i << ": " << schemas[i]) {
      const auto c = grammars.get({sampling::output_constraint::kind::json_schema, schemas[i]});
      grammar_matcher m(c.rules);
      std::string text;
      for (int step = 0; step < 48; ++step) {
        const token_mask whole = c.token_masks->compute(m);
        const auto mask = c.token_masks->of(m);
        ++compared;
        std::vector<std::int32_t> allowed;
        for (std::size_t id = 0; id < vocab->size(); ++id) {
          BOOST_REQUIRE_MESSAGE(mask->test(id) == whole.test(id),
                                "token " << id << " '" << vocab->bytes[id] << "' after '" << text << "': assembled " << mask->test(id));
          if (whole.test(id) && id != 0) allowed.push_back(std::int32_t(id));
        }
        if (allowed.empty()) break;  // complete and nothing may follow
        const auto pick = allowed[rng() % allowed.size()];
        BOOST_REQUIRE(m.accept(vocab->bytes[std::size_t(pick)]));
        text += vocab->bytes[std::size_t(pick)];
      }
      assembled += c.token_masks->stats().assembled;
    }
  }
  BOOST_TEST_MESSAGE(compared << " masks compared, " << assembled << " assembled from fragments");
  BOOST_TEST(assembled * 2 > compared);  // fragments serve most misses: the path is exercised
  BOOST_TEST(grammars.fragment_stats().hits > grammars.fragment_stats().misses);  // shared between schemas
}

BOOST_AUTO_TEST_CASE(strings_bounded_past_the_longest_token_share_fragments) {
  // Every token is at most 4 bytes here: a string with 100 characters left and one with 150
  // left are the same to any token, and spell the same fragment; one with 2 left is not.
  std::vector<std::string> tokens{"", "a", "ab", "abc", "abcd", "\"", "\",", "a\""};
  const auto vocab = std::make_shared<vocabulary>(tokens, std::vector<std::int32_t>{0});
  auto key_after = [&](int max_length, const std::string& written) {
    const auto g = compile_json_schema(R"({"type":"string","maxLength":)" + std::to_string(max_length) + "}");
    grammar_matcher m(g);
    BOOST_REQUIRE(m.accept(written));
    fragment_limits limits;
    limits.horizon = 4;
    std::vector<fragment_key> keys;
    for (const auto& s : m.stacks())
      if (!s.empty()) keys.push_back(choose_fragment(*g, s, limits).key);
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  BOOST_TEST((key_after(120, "\"aaaaaaaaaaaaaaaaaaaa") == key_after(170, "\"aaaaaaaaaaaaaaaaaaaa")));
  BOOST_TEST((key_after(120, "\"aaaaaaaaaaaaaaaaaaaa") != key_after(22, "\"aaaaaaaaaaaaaaaaaaaa")));
}

BOOST_AUTO_TEST_CASE(stacks_at_the_depth_budget_give_the_same_mask_as_the_whole_walk) {
  // Nesting near max_stack_depth cuts walks short, and can leave a reference on top of a stack
  // (it matches nothing); assembled masks must still equal the whole walk there.
  std::vector<std::string> tokens{"", "(", "((", "(((", ")", "))", "x", "x)", "(x", "x))"};
  const auto vocab = std::make_shared<vocabulary>(tokens, std::vector<std::int32_t>{0});
  grammar_budget budget;
  budget.max_stack_depth = 6;
  const auto g = parse_gbnf("root ::= item\nitem ::= \"(\" item \")\" | \"x\"", budget);
  masks cache(vocab);
  int compared = 0;
  for (const std::string text : {"", "(", "((", "(((", "((((", "((((("}) {
    grammar_matcher at(g);
    if (!at.accept(text)) break;  // past the budget the matcher refuses: nothing more to compare
    ++compared;
    const token_mask whole = cache.compute(at);
    const token_mask assembled = cache.assemble(at);
    for (std::size_t id = 0; id < tokens.size(); ++id)
      BOOST_CHECK_MESSAGE(assembled.test(id) == whole.test(id), "token '" << tokens[id] << "' after '" << text << "'");
  }
  BOOST_TEST(compared >= 4);  // the budget was reached, not stopped short of
}

BOOST_AUTO_TEST_CASE(a_scratch_reused_across_grammars_spells_what_a_fresh_one_spells) {
  // choose_fragment keeps its tables between calls (stamped, never cleared): a key must not
  // depend on what the tables held before, from another stack, another grammar of another size,
  // or across the stamps wrapping.
  const auto schemas = corpus_schemas();
  fragment_limits limits;
  limits.horizon = 8;
  fragment_scratch kept;
  std::mt19937 rng(5);
  int compared = 0;
  for (std::size_t i = 0; i < schemas.size(); i += 17) {
    const auto g = compile_json_schema(schemas[i]);
    grammar_matcher m(g);
    for (int step = 0; step < 40 && !m.exhausted(); ++step) {
      for (const auto& s : m.stacks()) {
        if (s.empty() || g->elements()[std::size_t(s.back())].k != grammar::kind::bytes) continue;
        if (compared == 100) kept.call = ~std::uint32_t(0);  // the next call wraps the stamps
        const fragment fresh = choose_fragment(*g, s, limits);
        const fragment reused = choose_fragment(*g, s, limits, &kept);
        BOOST_REQUIRE(reused.key == fresh.key);
        BOOST_REQUIRE(reused.frames.size() == fresh.frames.size());
        ++compared;
      }
      std::vector<int> next;  // a byte the grammar allows here
      for (int b = 32; b < 127; ++b) {
        grammar_matcher probe = m;
        if (probe.accept(static_cast<unsigned char>(b))) next.push_back(b);
      }
      if (next.empty()) break;
      m.accept(static_cast<unsigned char>(next[rng() % next.size()]));
    }
  }
  BOOST_TEST(compared > 300);
}

BOOST_AUTO_TEST_CASE(a_characters_alternatives_are_one_fragment_unless_the_state_was_cut) {
  // Inside a string every UTF-8 lead byte is an alternative of the character rule: a dozen
  // stacks from one entry of the rule, looked up (and walked) as one fragment. Where max_stacks
  // cut the state, some alternatives are gone and the entry would allow what the matcher
  // refuses: the mask must still equal the whole walk.
  const auto vocab = std::make_shared<vocabulary>(json_vocabulary(), std::vector<std::int32_t>{0});
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})";
  const std::string_view text = "{\"name\": \"";
  grammar_matcher uncut(compile_json_schema(schema));
  BOOST_REQUIRE(uncut.accept(text));
  const std::size_t n = uncut.stacks().size();
  BOOST_TEST_REQUIRE(n >= 10u);
  for (int max_stacks : {256, int(n) - 2}) {  // n - 2: the closing quote and one character alternative dropped
    BOOST_TEST_CONTEXT("max_stacks " << max_stacks) {
      grammar_budget budget;
      budget.max_stacks = max_stacks;
      grammar_matcher m(compile_json_schema(schema, budget));
      BOOST_REQUIRE(m.accept(text));
      auto fragments = std::make_shared<fragment_cache>();
      masks cache(vocab, std::size_t(32) << 20, fragments);
      const token_mask whole = cache.compute(m);
      const auto mask = cache.of(m);
      for (std::size_t id = 0; id < vocab->size(); ++id)
        BOOST_REQUIRE_MESSAGE(mask->test(id) == whole.test(id), "token '" << vocab->bytes[id] << "'");
      const auto looked_up = fragments->stats().hits + fragments->stats().misses;
      if (max_stacks == 256) BOOST_TEST(looked_up <= 2u);  // the character's entry and the closing quote
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sequences_mask_follows_its_state_through_accepts_and_rewinds) {
  // constrained_output keeps the masks of its last states: after a rewind and a different
  // token, the mask must be the new state's, never the one kept for the state it replaced.
  const auto vocab = std::make_shared<vocabulary>(json_vocabulary(), std::vector<std::int32_t>{0});
  grammar_cache grammars(vocab);
  const sampling::output_constraint c{sampling::output_constraint::kind::json_schema,
                                      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"]})"};
  constrained_output out(grammars.get(c));
  grammar_matcher shadow(compile_constraint(c));  // the same bytes, walked whole at each check
  masks whole_walk(vocab);
  auto allowed = [&](const token_mask& m) {
    std::vector<std::int32_t> ids;
    for (std::size_t id = 0; id < vocab->size(); ++id)
      if (m.test(id)) ids.push_back(std::int32_t(id));
    return ids;
  };
  auto check = [&](const char* where) {
    BOOST_TEST_CONTEXT(where << " after " << out.accepted() << " tokens") {
      BOOST_TEST(allowed(*out.mask()) == allowed(whole_walk.compute(shadow)));
      BOOST_TEST(out.mask() == out.mask());  // kept: the same mask object, not looked up again
    }
  };
  std::mt19937 rng(3);
  auto pick = [&]() -> std::int32_t {  // a token the mask allows that adds text, or -1
    std::vector<std::int32_t> text_ids;
    for (std::int32_t id : allowed(*out.mask()))
      if (!vocab->bytes[std::size_t(id)].empty()) text_ids.push_back(id);
    return text_ids.empty() ? -1 : text_ids[rng() % text_ids.size()];
  };
  for (int step = 0; step < 40 && !out.exhausted(); ++step) {
    check("before a proposal");
    const std::size_t before = out.accepted();
    // A proposal of up to three tokens, taken and then rewound, as the engine checks one.
    for (int j = 0; j < 3; ++j) {
      const std::int32_t t = pick();
      if (t < 0 || !out.accept(t)) break;
    }
    out.rewind(before);
    check("after a rewind");
    const std::int32_t t = pick();
    if (t < 0) break;
    BOOST_REQUIRE(out.accept(t));
    BOOST_REQUIRE(shadow.accept(vocab->bytes[std::size_t(t)]));
  }
  BOOST_TEST(out.accepted() >= 10u);
}
