// The pieces of BERT-style tokenizers (the embedding models served on /v1/embeddings), by the
// Hugging Face tokenizers library's semantics: the BertNormalizer, the BertPreTokenizer and the
// Whitespace pre-tokenizers and the WordPiece model (its decoder is in text_steps.h). Written here because the
// tokenizer (tokenizer.h) is ours; these are its BERT parts, kept apart from the BPE ones.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tokenizer {

struct bert_normalizer_options {
  bool clean_text = true;           // controls and U+FFFD dropped, white space made ' '
  bool handle_chinese_chars = true;  // CJK ideographs padded with spaces
  bool strip_accents = true;        // NFD, then nonspacing marks dropped (null in the file: as lowercase)
  bool lowercase = true;
};
std::u32string bert_normalize(std::u32string_view s, const bert_normalizer_options& o);

// The library's character classes for pre-tokenizers: punctuation is ASCII punctuation or a
// Unicode P* category (BertPreTokenizer, Punctuation); numeric is Nd, Nl or No (Digits: Rust's
// char::is_numeric).
bool punctuation(char32_t c);
bool numeric(char32_t c);

// BertPreTokenizer: split on white space (dropped), every punctuation character (ASCII
// punctuation or a Unicode P* category) a piece of its own.
void bert_pretokenize(std::u32string_view s, std::vector<std::u32string>& out);
// Whitespace: the pieces \w+ and [^\w\s]+ (white space dropped); WhitespaceSplit: split on
// white space only.
void whitespace_pretokenize(std::u32string_view s, bool split_only, std::vector<std::u32string>& out);

// One word by WordPiece: greedy longest match from the left, every piece after the first
// spelled with `prefix` ("##"); a word with a part no piece matches, or longer than
// `max_chars` characters, is the unknown token alone.
struct wordpiece_model {
  std::function<std::optional<std::int32_t>(const std::string&)> find;  // a piece's id
  std::string prefix = "##";
  std::size_t max_chars = 100;
  std::int32_t unk = 0;
  void encode_word(const std::u32string& word, std::vector<std::int32_t>& out) const;
};

}  // namespace troupe::tokenizer
