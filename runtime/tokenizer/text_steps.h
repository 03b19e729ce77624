// The steps of a tokenizer.json that turn text into text, by the Hugging Face tokenizers
// library's semantics: the normalizers before the model (NFC, NFD, NFKC, NFKD, Lowercase,
// Strip, BertNormalizer, Prepend, Replace) and the decoders after it (ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, WordPiece), each chain parsed from its JSON and applied;
// and the library's clean-up of spaces. The tokenizer (tokenizer.h) runs them around its model.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/wordpiece.h"

namespace troupe::tokenizer {

struct normalizer_step {
  enum { nfc, nfd, nfkc, nfkd, lowercase, strip, prepend, replace, bert } kind;
  std::string a, b;        // prepend: a; replace: a by b
  bool left = false, right = false;  // strip
  bert_normalizer_options bert_options = {};
};

// Appends a normalizer's steps (a Sequence flattened); throws input_error naming `source` and a
// component not built.
void parse_normalizer(const nlohmann::json& n, const std::string& source, std::vector<normalizer_step>& normalizers);
std::u32string normalize(const std::vector<normalizer_step>& normalizers, std::u32string s);

struct decoder_step {
  enum { byte_level, replace, byte_fallback, fuse, strip, metaspace, wordpiece } kind;
  std::string a, b;
  int start = 0, stop = 0;
  bool prepend = false;  // metaspace; wordpiece: its clean-up
};

// Appends a decoder's steps (a Sequence flattened); throws input_error naming `source` and a
// component not built.
void parse_decoder(const nlohmann::json& d, const std::string& source, std::vector<decoder_step>& decoders);
// The tokens' texts (`added`: which are added tokens, whose text ByteLevel leaves alone) through
// the chain, each step over the whole list as the library applies them (Fuse joins the list),
// then joined.
std::string run_decoders(const std::vector<decoder_step>& decoders, std::vector<std::string> tokens, std::vector<bool> added);

// Every occurrence of `from` replaced by `to` (none for an empty `from`).
void replace_all(std::string& s, const std::string& from, const std::string& to);
// The library's clean-up of the spaces a decode leaves before punctuation and contractions
// (clean_up_tokenization_spaces); `do_not`: also " do not" to " don't", as its WordPiece
// decoder's clean-up does.
void clean_up_tokenization(std::string& s, bool do_not);

}  // namespace troupe::tokenizer
