// GGUF tokenizers (runtime/tokenizer/gguf_vocab.h) on vocabularies made here, where the right
// answer follows from the algorithm: SentencePiece merges ranked by the made piece's score,
// spaces as "▁", unknown characters as <0xNN> bytes, BOS prepended; a gpt2 vocabulary encodes
// as its byte-level BPE merges say. Unsupported kinds are errors naming the key.
#define BOOST_TEST_MODULE gguf_tokenizer
#include <boost/test/unit_test.hpp>

#include <cstdio>

#include "runtime/common/error.h"
#include "runtime/tokenizer/gguf_vocab.h"
#include "runtime/tokenizer/tokenizer.h"

using namespace troupe;
using nlohmann::json;

namespace {

json spm_vocab() {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<float> scores{0, 0, 0};
  std::vector<int> types{2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  const std::pair<const char*, float> pieces[] = {{"\u2581", -1}, {"a", -2}, {"b", -3}, {"\u2581a", -4}, {"ab", -5}, {"\u2581ab", -6}};
  for (auto& [p, s] : pieces) {
    tokens.push_back(p);
    scores.push_back(s);
    types.push_back(1);
  }
  return {{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", tokens}, {"tokenizer.ggml.scores", scores},
          {"tokenizer.ggml.token_type", types}, {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2},
          {"tokenizer.ggml.unknown_token_id", 0}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(sentencepiece_vocabularies_merge_by_score_and_fall_back_to_bytes) {
  const auto tok = tokenizer::tokenizer::from_document(tokenizer::tokenizer_json_from_gguf(spm_vocab(), "spm"), "spm");
  // "ab a" -> "▁ab▁a": (▁,a) ranks first, then (▁a,b): ▁ab ▁a.
  BOOST_TEST((tok->encode("ab a", true) == std::vector<std::int32_t>{1, 264, 262}));
  // "ba" -> "▁ba": no merge applies to ▁ b a.
  BOOST_TEST((tok->encode("ba", false) == std::vector<std::int32_t>{259, 261, 260}));
  // "é" is no piece: its UTF-8 bytes.
  BOOST_TEST((tok->encode("é", false) == std::vector<std::int32_t>{259, 3 + 0xC3, 3 + 0xA9}));
  BOOST_TEST(tok->decode({264, 262}) == "ab a");
  BOOST_TEST(tok->decode({259, 3 + 0xC3, 3 + 0xA9}) == "é");
}

BOOST_AUTO_TEST_CASE(gpt2_vocabularies_follow_their_merges) {
  // Byte-level: a space is "Ġ". Merges: (h,i) then (Ġ,hi).
  json m = {{"tokenizer.ggml.model", "gpt2"},
            {"tokenizer.ggml.tokens", {"<|bos|>", "h", "i", "\u0120", "hi", "\u0120hi"}},
            {"tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1}},
            {"tokenizer.ggml.merges", {"h i", "\u0120 hi"}},
            {"tokenizer.ggml.bos_token_id", 0},
            {"tokenizer.ggml.add_bos_token", true},
            {"tokenizer.ggml.pre", "gpt2"}};
  const auto tok = tokenizer::tokenizer::from_document(tokenizer::tokenizer_json_from_gguf(m, "gpt2"), "gpt2");
  BOOST_TEST((tok->encode("hi hi", true) == std::vector<std::int32_t>{0, 4, 5}));
  BOOST_TEST(tok->decode({4, 5}) == "hi hi");
}

BOOST_AUTO_TEST_CASE(unsupported_tokenizers_are_errors_naming_the_key) {
  auto expect = [](const json& m, const std::string& words) {
    try {
      tokenizer::tokenizer_json_from_gguf(m, "f.gguf");
      BOOST_FAIL("no error, wanted " << words);
    } catch (const input_error& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
  };
  expect({{"tokenizer.ggml.model", "bert"}, {"tokenizer.ggml.tokens", {"a"}}}, "tokenizer.ggml.model is 'bert'");
  expect({{"tokenizer.ggml.tokens", {"a"}}}, "metadata 'tokenizer.ggml.model' is missing");
  json pre = {{"tokenizer.ggml.model", "gpt2"}, {"tokenizer.ggml.tokens", {"a"}}, {"tokenizer.ggml.merges", json::array()},
              {"tokenizer.ggml.pre", "deepseek-coder"}};
  expect(pre, "tokenizer.ggml.pre is 'deepseek-coder'");
  json scores = spm_vocab();
  scores["tokenizer.ggml.scores"] = {1.0};
  expect(scores, "one score per token");
}
