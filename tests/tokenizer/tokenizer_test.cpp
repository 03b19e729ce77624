#define BOOST_TEST_MODULE tokenizer
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/synth_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

using namespace troupe::tokenizer;

namespace {

std::vector<std::string> split_all(const std::string& pattern, const std::string& text) {
  regex re(pattern);
  std::u32string s = utf8_decode(text);
  std::vector<std::string> out;
  std::size_t pos = 0, b, e;
  while (pos < s.size() && re.search(s, pos, b, e) && e > b) {
    out.push_back(utf8_encode(s.substr(b, e - b)));
    pos = e;
  }
  return out;
}

const char* const llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

BOOST_AUTO_TEST_CASE(regex_splits_like_the_llama3_pre_tokenizer) {
  BOOST_TEST(split_all(llama3, "Hello, WORLD'S 12345 ok") ==
             (std::vector<std::string>{"Hello", ",", " WORLD", "'S", " ", "123", "45", " ok"}));
  // \s+(?!\S) leaves the last space to the next word.
  BOOST_TEST(split_all(llama3, "a   b") == (std::vector<std::string>{"a", "  ", " b"}));
  BOOST_TEST(split_all(llama3, "x\n\n y") == (std::vector<std::string>{"x", "\n\n", " y"}));
  BOOST_TEST(split_all(llama3, "caf\xc3\xa9!!") == (std::vector<std::string>{"caf\xc3\xa9", "!!"}));
}

BOOST_AUTO_TEST_CASE(regex_reports_unsupported_constructs) {
  BOOST_CHECK_EXCEPTION(regex("\\p{Greek}"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("\\p{Greek}") != std::string::npos;
  });
  BOOST_CHECK_THROW(regex("(abc"), troupe::input_error);
  BOOST_CHECK_THROW(regex("^a"), troupe::input_error);
}

BOOST_AUTO_TEST_CASE(nfc_composes_and_orders_marks) {
  BOOST_TEST(utf8_encode(nfc(U"cafe\u0301")) == "caf\xc3\xa9");
  BOOST_TEST(utf8_encode(nfc(U"\u1100\u1161\u11a8")) == utf8_encode(U"\uac01"));  // Hangul LVT
  // Marks of different classes are reordered (dot below 220 before acute 230) then composed.
  BOOST_TEST(utf8_encode(nfc(U"q\u0307\u0323")) == utf8_encode(U"q\u0323\u0307"));
  BOOST_TEST(utf8_encode(nfc(U"\u212b")) == utf8_encode(U"\u00c5"));  // singleton: Angstrom sign
  BOOST_TEST(utf8_encode(nfc(U"plain ascii")) == "plain ascii");
}

BOOST_AUTO_TEST_CASE(utf8_helpers_handle_truncated_and_invalid_input) {
  const std::string smile = "\xf0\x9f\x98\x80";
  BOOST_TEST(utf8_complete_prefix("ab" + smile.substr(0, 2)) == 2u);
  BOOST_TEST(utf8_complete_prefix("ab" + smile) == 6u);
  BOOST_TEST(utf8_sanitize("a\xff" "b") == "a\xef\xbf\xbd" "b");
}

BOOST_AUTO_TEST_CASE(incremental_detokenizer_never_emits_half_a_character) {
  auto tok = tokenizer::from_json(synth_tokenizer_json(2000, 1), "synth");
  const std::string text = "emoji \xf0\x9f\x98\x80 and \xe6\x97\xa5\xe6\x9c\xac plus caf\xc3\xa9 end";
  const auto ids = tok->encode(text, false);
  incremental_detokenizer d;
  std::vector<std::int32_t> so_far;
  std::string streamed;
  for (auto id : ids) {
    so_far.push_back(id);
    std::string delta = d.next(*tok, so_far);
    BOOST_TEST_REQUIRE(utf8_complete_prefix(delta) == delta.size(), "delta splits a character");
    streamed += delta;
  }
  streamed += d.flush(*tok, so_far);
  BOOST_TEST(streamed == text);
}

// The README's chat curl stalled: a byte token that never completes a character made the
// detokenizer wait for good, so 822 deltas came empty and all the text came at the end.
BOOST_AUTO_TEST_CASE(incremental_detokenizer_emits_bytes_that_cannot_complete_as_u_fffd_at_once) {
  auto tok = tokenizer::from_json(synth_tokenizer_json(2000, 1), "synth");
  auto id_of_bytes = [&](const std::string& b) {
    for (std::int32_t i = 0; i < tok->vocab_size(); ++i)
      if (tok->decode_bytes({i}) == b) return i;
    BOOST_FAIL("no token for the bytes");
    return -1;
  };
  const std::int32_t cont = id_of_bytes("\x80"), lead3 = id_of_bytes("\xe2"), a = id_of_bytes("a");
  incremental_detokenizer d;
  std::vector<std::int32_t> ids = {a, cont};
  BOOST_TEST(d.next(*tok, std::span<const std::int32_t>(ids.data(), 1)) == "a");
  BOOST_TEST(d.next(*tok, ids) == "\xef\xbf\xbd");  // a lone continuation byte: U+FFFD now
  for (int i = 0; i < 50; ++i) {                     // and the stream goes on, one delta per token
    ids.push_back(a);
    BOOST_TEST_REQUIRE(d.next(*tok, ids) == "a");
  }
  ids.push_back(lead3);
  BOOST_TEST(d.next(*tok, ids) == "");  // a lead byte may still be completed: wait
  ids.push_back(a);
  BOOST_TEST(d.next(*tok, ids) == "\xef\xbf\xbd" "a");  // it was not
  BOOST_TEST(d.flush(*tok, ids) == "");
  BOOST_TEST(utf8_incomplete_tail("ab\xe2\x82") == 2u);
  BOOST_TEST(utf8_incomplete_tail("ab\xe2\x82\xac") == 0u);
  BOOST_TEST(utf8_incomplete_tail("\xf0\x9f\x98") == 3u);
  BOOST_TEST(utf8_incomplete_tail("\x80\x80\x80") == 0u);
  BOOST_TEST(utf8_incomplete_tail("\xc0") == 0u);  // never valid
}

BOOST_AUTO_TEST_CASE(synthesized_vocabulary_has_the_requested_size_and_specials) {
  auto tok = tokenizer::from_json(synth_tokenizer_json(512, 0), "synth");
  BOOST_TEST(tok->vocab_size() == 512);
  auto sp = synth_special_ids(512);
  BOOST_TEST(*tok->token_id("<|end_of_text|>") == sp.eos);
  BOOST_TEST(tok->is_special(sp.bos));
  auto ids = tok->encode("hi", true);
  BOOST_TEST(ids.front() == sp.bos);
  BOOST_TEST(tok->decode(ids) == "hi");  // specials skipped
  BOOST_TEST(synth_tokenizer_json(512, 0) == synth_tokenizer_json(512, 0));
}

BOOST_AUTO_TEST_CASE(unsupported_components_are_named) {
  const std::string unigram = R"({"model": {"type": "Unigram", "vocab": []}})";
  BOOST_CHECK_EXCEPTION(tokenizer::from_json(unigram, "x/tokenizer.json"), troupe::input_error,
                        [](const troupe::input_error& e) {
                          std::string w = e.what();
                          return w.find("x/tokenizer.json") != std::string::npos && w.find("Unigram") != std::string::npos;
                        });
  const std::string no_unk = R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})";
  BOOST_CHECK_EXCEPTION(tokenizer::from_json(no_unk, "t.json"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("[UNK]") != std::string::npos;
  });
  const std::string bad_norm = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "Precompiled"}})";
  BOOST_CHECK_EXCEPTION(tokenizer::from_json(bad_norm, "t.json"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("Precompiled") != std::string::npos;
  });
  const std::string bad_pre = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "UnicodeScripts"}})";
  BOOST_CHECK_EXCEPTION(tokenizer::from_json(bad_pre, "t.json"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("UnicodeScripts") != std::string::npos;
  });
  const std::string bad_punct = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Punctuation", "behavior": "Sideways"}})";
  BOOST_CHECK_EXCEPTION(tokenizer::from_json(bad_punct, "t.json"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("Punctuation: behavior 'Sideways'") != std::string::npos;
  });
  BOOST_CHECK_THROW(tokenizer::from_json("{not json", "t.json"), troupe::input_error);
}

// Digits splits at every numeral Rust's char::is_numeric knows (a superscript two is No), and
// Punctuation's behavior applies (Removed drops the marks); the vocabulary holds the whole word
// too, so a step that did not split would show as its one id.
BOOST_AUTO_TEST_CASE(digits_and_punctuation_split_by_their_classes) {
  const nlohmann::json vocab = {{"x", 0}, {"\u00b2", 1}, {"3", 2}, {"x\u00b23", 3}, {"a", 4}, {"b", 5}, {",", 6}, {"a,b", 7}, {"23", 8}};
  auto with = [&](const nlohmann::json& pre) {
    return tokenizer::from_json(nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()},
                                                          {"ignore_merges", true}}},
                                               {"pre_tokenizer", pre}}.dump(), "t.json");
  };
  BOOST_TEST(with(nullptr)->encode("x\u00b23", false) == std::vector<std::int32_t>({3}));
  BOOST_TEST(with({{"type", "Digits"}, {"individual_digits", true}})->encode("x\u00b23", false) == std::vector<std::int32_t>({0, 1, 2}));
  BOOST_TEST(with({{"type", "Digits"}, {"individual_digits", false}})->encode("x\u00b23", false) == std::vector<std::int32_t>({0, 1, 2}));
  BOOST_TEST(with({{"type", "Digits"}})->encode("x23", false) == std::vector<std::int32_t>({0, 8}));  // a run stays one piece
  BOOST_TEST(with({{"type", "Punctuation"}})->encode("a,b", false) == std::vector<std::int32_t>({4, 6, 5}));
  BOOST_TEST(with({{"type", "Punctuation"}, {"behavior", "Removed"}})->encode("a,b", false) == std::vector<std::int32_t>({4, 5}));
}

namespace {

// A tokenizer whose vocabulary holds every piece the Split behaviors below produce (and each
// character): with ignore_merges a piece found whole is one id, so the ids show the pieces.
std::vector<std::string> pieces_of(const std::string& behavior, bool invert, const std::string& pattern_json, const std::string& text) {
  const std::vector<std::string> words = {"t", "h", "e", "-", "f", "i", "n", "a", "l", "c", "o", "u", "w", "the", "final", "countdown",
                                          "the-", "final-", "-final", "-countdown", "--", "the-final", "-final-", "--countdown"};
  nlohmann::json vocab = nlohmann::json::object();
  for (std::size_t i = 0; i < words.size(); ++i) vocab[words[i]] = i;
  const nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}, {"ignore_merges", true}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", nlohmann::json::parse(pattern_json)}, {"behavior", behavior}, {"invert", invert}}}};
  auto tok = tokenizer::from_json(j.dump(), "split");
  std::vector<std::string> out;
  for (auto id : tok->encode(text, false)) out.push_back(*tok->token_text(id));
  return out;
}

using pieces = std::vector<std::string>;

}  // namespace

// The Hugging Face tokenizers' SplitDelimiterBehavior, on its documentation's example.
BOOST_AUTO_TEST_CASE(split_behaviors_place_the_delimiter_as_the_hugging_face_library_does) {
  const std::string dash = R"({"String": "-"})", text = "the-final--countdown";
  BOOST_TEST(pieces_of("Removed", false, dash, text) == (pieces{"the", "final", "countdown"}));
  BOOST_TEST(pieces_of("Isolated", false, dash, text) == (pieces{"the", "-", "final", "-", "-", "countdown"}));
  BOOST_TEST(pieces_of("MergedWithPrevious", false, dash, text) == (pieces{"the-", "final-", "-", "countdown"}));
  BOOST_TEST(pieces_of("MergedWithNext", false, dash, text) == (pieces{"the", "-final", "-", "-countdown"}));
  BOOST_TEST(pieces_of("Contiguous", false, dash, text) == (pieces{"the", "-", "final", "--", "countdown"}));
  // A regex pattern; inverted, the words are the delimiters and the dashes what lies between.
  const std::string words = R"({"Regex": "\\p{L}+"})";
  BOOST_TEST(pieces_of("Isolated", false, words, text) == (pieces{"the", "-", "final", "--", "countdown"}));
  BOOST_TEST(pieces_of("Removed", true, words, text) == (pieces{"the", "final", "countdown"}));
  // Inverted, each word joins the dash after it.
  BOOST_TEST(pieces_of("MergedWithNext", true, dash, text) == (pieces{"the-", "final-", "-", "countdown"}));
  BOOST_CHECK_EXCEPTION(pieces_of("Sideways", false, dash, text), troupe::input_error,
                        [](const troupe::input_error& e) { return std::string(e.what()).find("'Sideways'") != std::string::npos; });
}

// gpt-oss and DeepSeek V3's pre-tokenizers: letter cases, marks, punctuation and symbols, and
// ranges of CJK characters.
BOOST_AUTO_TEST_CASE(regex_classes_cover_the_general_categories) {
  BOOST_TEST(split_all(R"(\p{Lu}+|\p{Ll}+)", "HelloWORLDxy") == (std::vector<std::string>{"H", "ello", "WORLD", "xy"}));
  BOOST_TEST(split_all(R"([\p{P}\p{S}]+)", "a+b=c, ok! $5") == (std::vector<std::string>{"+", "=", ",", "!", "$"}));
  BOOST_TEST(split_all(R"(\P{L}+)", "ab12 cd") == (std::vector<std::string>{"12 "}));
  BOOST_TEST(split_all(R"([^\p{L}\p{N}]+)", "a, 1.b") == (std::vector<std::string>{", ", "."}));
  BOOST_TEST(split_all("[\u4e00-\u9fa5]+", "ab\u4e2d\u6587cd") == (std::vector<std::string>{"\u4e2d\u6587"}));
  BOOST_TEST(split_all(R"(\p{L}\p{M}*)", "e\u0301x") == (std::vector<std::string>{"e\u0301", "x"}));
  BOOST_TEST(split_all(R"((?i:[a-c]+))", "xAbCx") == (std::vector<std::string>{"AbC"}));
  BOOST_TEST(int(category_of(U'A')) == int(general_category::lu));
  BOOST_TEST(int(category_of(U'\u01c5')) == int(general_category::lt));  // Dz with caron: titlecase
  BOOST_TEST(int(category_of(U'\u0301')) == int(general_category::mn));
  BOOST_TEST(int(category_of(U'\U0001F600')) == int(general_category::so));
  BOOST_TEST(int(category_of(U'\U000E0001')) == int(general_category::cf));
  BOOST_TEST(int(category_of(U'\u0378')) == int(general_category::cn));
  BOOST_CHECK_THROW(regex("[z-a]"), troupe::input_error);
}
