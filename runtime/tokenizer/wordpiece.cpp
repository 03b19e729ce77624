#include "runtime/tokenizer/wordpiece.h"

#include "runtime/tokenizer/unicode.h"

namespace troupe::tokenizer {

namespace {

using gc = general_category;

bool bert_space(char32_t c) { return c == U'\t' || c == U'\n' || c == U'\r' || is_space(c); }

bool bert_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  const gc g = category_of(c);
  return g == gc::cc || g == gc::cf || g == gc::cs || g == gc::co || g == gc::cn;
}

bool chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// \w as the library's regex has it: letters, marks, digits and connector punctuation.
bool word_char(char32_t c) {
  const gc g = category_of(c);
  return g <= gc::lo || g == gc::mn || g == gc::mc || g == gc::me || g == gc::nd || g == gc::nl || g == gc::no || g == gc::pc;
}

}  // namespace

std::u32string bert_normalize(std::u32string_view s, const bert_normalizer_options& o) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (o.clean_text && (c == 0 || c == 0xFFFD || bert_control(c))) continue;
    if (o.clean_text && bert_space(c)) c = U' ';
    if (o.handle_chinese_chars && chinese(c)) {
      out += U' ';
      out += c;
      out += U' ';
    } else {
      out += c;
    }
  }
  if (o.strip_accents) {
    std::u32string kept;
    for (char32_t c : nfd(out))
      if (category_of(c) != gc::mn) kept += c;
    out = std::move(kept);
  }
  if (o.lowercase) out = lowercase(out);
  return out;
}

bool punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  const gc g = category_of(c);
  return g == gc::pc || g == gc::pd || g == gc::ps || g == gc::pe || g == gc::pi || g == gc::pf || g == gc::po;
}

bool numeric(char32_t c) {
  const gc g = category_of(c);
  return g == gc::nd || g == gc::nl || g == gc::no;
}

void bert_pretokenize(std::u32string_view s, std::vector<std::u32string>& out) {
  std::u32string word;
  for (char32_t c : s) {
    if (bert_space(c) || punctuation(c)) {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
      if (!bert_space(c)) out.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
}

void whitespace_pretokenize(std::u32string_view s, bool split_only, std::vector<std::u32string>& out) {
  std::u32string piece;
  int kind = 0;  // of the piece so far: 1 word characters, 2 others
  for (char32_t c : s) {
    if (is_space(c)) {
      if (!piece.empty()) out.push_back(std::move(piece));
      piece.clear();
      kind = 0;
      continue;
    }
    const int k = split_only ? 1 : word_char(c) ? 1 : 2;
    if (k != kind && !piece.empty()) {
      out.push_back(std::move(piece));
      piece.clear();
    }
    piece += c;
    kind = k;
  }
  if (!piece.empty()) out.push_back(std::move(piece));
}

void wordpiece_model::encode_word(const std::u32string& word, std::vector<std::int32_t>& out) const {
  if (word.size() > max_chars) {
    out.push_back(unk);
    return;
  }
  std::vector<std::int32_t> pieces;
  for (std::size_t start = 0; start < word.size();) {
    std::optional<std::int32_t> found;
    std::size_t end = word.size();
    for (; end > start; --end) {
      std::string piece = start > 0 ? prefix : std::string();
      for (std::size_t i = start; i < end; ++i) utf8_append(piece, word[i]);
      if ((found = find(piece))) break;
    }
    if (!found) {
      out.push_back(unk);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace troupe::tokenizer
