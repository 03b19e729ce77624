#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"
#include "runtime/tokenizer/bpe_merges.h"
#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/text_steps.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/wordpiece.h"

namespace troupe::tokenizer {

using nlohmann::json;

namespace {

const char* const gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// How a Split pre-tokenizer treats what its pattern matched (the Hugging Face tokenizers'
// SplitDelimiterBehavior).
enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct pretokenizer_step {
  enum { split, byte_level, metaspace, bert, whitespace, whitespace_split } kind;
  std::shared_ptr<regex> re;  // split, or byte_level with use_regex
  std::u32string literal;     // split on a String pattern (re null)
  bool (*each_char)(char32_t) = nullptr;  // split on every character of a class (Digits, Punctuation)
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;
  std::string replacement;    // metaspace
  std::string prepend_scheme = "always";
  bool split_on_replacement = true;
};

struct added_token {
  std::string content;
  std::int32_t id;
  bool special, lstrip, rstrip;
};

}  // namespace

struct tokenizer::impl {
  std::string source;
  std::vector<normalizer_step> normalizers;
  std::vector<pretokenizer_step> pretokenizers;
  std::vector<decoder_step> decoders;
  std::unordered_map<std::string, std::int32_t> vocab;
  std::vector<std::string> id_to_token;
  bpe_merges merges;
  std::vector<std::pair<std::string, std::string>> pending_merges;  // until the added tokens are in
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  bool clean_up_spaces = false;  // tokenizer_config.json's clean_up_tokenization_spaces (detokenize)
  std::optional<std::int32_t> unk_id;
  std::optional<wordpiece_model> wordpiece;  // the model, when it is WordPiece rather than BPE
  std::vector<added_token> added;
  std::unordered_map<std::int32_t, std::size_t> added_by_id;
  std::unordered_set<std::int32_t> special_ids;
  std::vector<std::int32_t> prefix_ids, suffix_ids;  // post-processor template
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> word_cache;

  [[noreturn]] void fail(const std::string& what) const { throw input_error(source + ": " + what); }

  // A Split or Punctuation step's "behavior" (`fallback` where it may be absent).
  split_behavior behavior_of(const json& p, const std::string& step, const char* fallback) const {
    static const std::map<std::string, split_behavior> behaviors = {
        {"Removed", split_behavior::removed}, {"Isolated", split_behavior::isolated},
        {"MergedWithPrevious", split_behavior::merged_with_previous}, {"MergedWithNext", split_behavior::merged_with_next},
        {"Contiguous", split_behavior::contiguous}};
    const std::string name = p.value("behavior", fallback);
    const auto b = behaviors.find(name);
    if (b == behaviors.end())
      fail("pre-tokenizer " + step + ": behavior '" + name + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    return b->second;
  }

  void parse_pretokenizer(const json& p) {
    if (p.is_null()) return;
    std::string type = p.value("type", "");
    pretokenizer_step s{};
    if (type == "Sequence") {
      for (auto& x : p.at("pretokenizers")) parse_pretokenizer(x);
      return;
    } else if (type == "Split") {
      s.kind = pretokenizer_step::split;
      s.behavior = behavior_of(p, "Split", "");
      s.invert = p.value("invert", false);
      const json& pat = p.at("pattern");
      if (pat.contains("Regex")) s.re = std::make_shared<regex>(pat["Regex"].get<std::string>());
      else if (pat.contains("String")) s.literal = utf8_decode(pat["String"].get<std::string>());
      else fail("pre-tokenizer Split needs a Regex or String pattern");
      if (!s.re && s.literal.empty()) fail("pre-tokenizer Split: an empty String pattern");
    } else if (type == "ByteLevel") {
      s.kind = pretokenizer_step::byte_level;
      s.add_prefix_space = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) s.re = std::make_shared<regex>(gpt2_pattern);
    } else if (type == "Metaspace") {
      s.kind = pretokenizer_step::metaspace;
      s.replacement = p.value("replacement", "\xe2\x96\x81");
      s.prepend_scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
      s.split_on_replacement = p.value("split", true);
    } else if (type == "Digits") {  // numerals apart from the rest: each alone, or runs of them
      s.kind = pretokenizer_step::split;
      s.each_char = numeric;
      s.behavior = p.value("individual_digits", false) ? split_behavior::isolated : split_behavior::contiguous;
    } else if (type == "Punctuation") {
      s.kind = pretokenizer_step::split;
      s.each_char = punctuation;
      s.behavior = behavior_of(p, "Punctuation", "Isolated");
    } else if (type == "BertPreTokenizer") {
      s.kind = pretokenizer_step::bert;
    } else if (type == "Whitespace" || type == "WhitespaceSplit") {
      s.kind = type == "Whitespace" ? pretokenizer_step::whitespace : pretokenizer_step::whitespace_split;
    } else {
      fail("pre-tokenizer '" + type + "' is not supported (Split, ByteLevel, Metaspace, Digits, Punctuation, BertPreTokenizer, Whitespace, WhitespaceSplit, Sequence)");
    }
    pretokenizers.push_back(std::move(s));
  }

  void parse_post_processor(const json& p) {
    if (p.is_null()) return;
    std::string type = p.value("type", "");
    if (type == "Sequence") {
      for (auto& x : p.at("processors")) parse_post_processor(x);
    } else if (type == "TemplateProcessing") {
      bool seen_a = false;
      for (auto& item : p.at("single")) {
        if (item.contains("Sequence")) {
          seen_a = true;
          continue;
        }
        std::string name = item.at("SpecialToken").at("id").get<std::string>();
        const json& st = p.at("special_tokens").at(name);
        for (auto& id : st.at("ids")) (seen_a ? suffix_ids : prefix_ids).push_back(id.get<std::int32_t>());
      }
    } else if (type == "BertProcessing") {  // [CLS] text [SEP]: each given as [text, id]
      prefix_ids.push_back(p.at("cls").at(1).get<std::int32_t>());
      suffix_ids.push_back(p.at("sep").at(1).get<std::int32_t>());
    } else if (type != "ByteLevel") {
      fail("post-processor '" + type + "' is not supported (TemplateProcessing, BertProcessing, ByteLevel, Sequence)");
    }
  }

  // WordPiece: a vocabulary and the greedy longest match (wordpiece.h); no merges.
  void parse_wordpiece(const json& m) {
    for (auto& [tok, id] : m.at("vocab").items()) add_token(tok, id.get<std::int32_t>());
    wordpiece_model w;
    w.prefix = m.value("continuing_subword_prefix", "##");
    w.max_chars = m.value("max_input_chars_per_word", std::size_t(100));
    const std::string unk = m.value("unk_token", "[UNK]");
    auto it = vocab.find(unk);
    if (it == vocab.end()) fail("WordPiece unk_token '" + unk + "' is not in the vocabulary");
    w.unk = it->second;
    w.find = [this](const std::string& piece) -> std::optional<std::int32_t> {
      auto f = vocab.find(piece);
      if (f == vocab.end()) return std::nullopt;
      return f->second;
    };
    wordpiece = std::move(w);
  }

  void parse_model(const json& m) {
    if (m.value("type", "BPE") == "WordPiece") return parse_wordpiece(m);
    if (m.value("type", "BPE") != "BPE") fail("model type '" + m.value("type", "") + "' is not supported (BPE, WordPiece)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
        fail(std::string("BPE ") + key + " is not supported");
    for (auto& [tok, id] : m.at("vocab").items()) add_token(tok, id.get<std::int32_t>());
    for (auto& merge : m.at("merges")) {
      std::string a, b;
      if (merge.is_array()) {
        a = merge.at(0).get<std::string>();
        b = merge.at(1).get<std::string>();
      } else {
        std::string s = merge.get<std::string>();
        auto sp = s.find(' ');
        if (sp == std::string::npos) fail("merge '" + s + "' has no space separator");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      }
      pending_merges.emplace_back(std::move(a), std::move(b));
    }
    byte_fallback = m.value("byte_fallback", false);
    fuse_unk = m.value("fuse_unk", false);
    ignore_merges = m.value("ignore_merges", false);
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it == vocab.end()) fail("unk_token '" + m["unk_token"].get<std::string>() + "' is not in the vocabulary");
      unk_id = it->second;
    }
  }

  // The merges by id, once every token (added ones too) has its id.
  void index_merges() {
    merges = bpe_merges(pending_merges, vocab);
    pending_merges.clear();
    pending_merges.shrink_to_fit();
  }

  void add_token(const std::string& tok, std::int32_t id) {
    if (id < 0) fail("token '" + tok + "' has a negative id");
    vocab[tok] = id;
    if (std::size_t(id) >= id_to_token.size()) id_to_token.resize(std::size_t(id) + 1);
    id_to_token[std::size_t(id)] = tok;
  }

  // Splits one normalized segment into words for the BPE model.
  std::vector<std::u32string> pretokenize(std::u32string text) const {
    std::vector<std::u32string> pieces{std::move(text)};
    for (auto& step : pretokenizers) {
      std::vector<std::u32string> next;
      for (auto& piece : pieces) {
        if (step.kind == pretokenizer_step::split) {
          split(step, piece, next);
        } else if (step.kind == pretokenizer_step::bert) {
          bert_pretokenize(piece, next);
        } else if (step.kind == pretokenizer_step::whitespace || step.kind == pretokenizer_step::whitespace_split) {
          whitespace_pretokenize(piece, step.kind == pretokenizer_step::whitespace_split, next);
        } else if (step.kind == pretokenizer_step::byte_level) {
          std::u32string p = piece;
          if (step.add_prefix_space && (p.empty() || p[0] != U' ')) p.insert(p.begin(), U' ');
          std::vector<std::u32string> parts;
          if (step.re) split(step, p, parts);  // GPT-2's regex, Isolated
          else parts.push_back(p);
          for (auto& part : parts) next.push_back(utf8_decode(bytes_to_symbols(utf8_encode(part))));
        } else {
          std::u32string rep = utf8_decode(step.replacement), p;
          for (char32_t c : piece) {
            if (c == U' ') p += rep;
            else p.push_back(c);
          }
          bool first = &piece == &pieces.front();
          if ((step.prepend_scheme == "always" || (step.prepend_scheme == "first" && first)) && p.rfind(rep, 0) != 0)
            p = rep + p;
          if (!step.split_on_replacement) {
            next.push_back(p);
            continue;
          }
          std::size_t start = 0;  // split before each replacement char, keeping it
          for (std::size_t i = 1; i <= p.size(); ++i)
            if (i == p.size() || p.compare(i, rep.size(), rep) == 0) {
              if (i > start) next.push_back(p.substr(start, i - start));
              start = i;
            }
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  // The pieces of `s` the pattern matched and those between, in order (empty matches split
  // nothing).
  struct piece_span {
    std::size_t begin, end;
    bool matched;
  };
  static std::vector<piece_span> find_matches(const pretokenizer_step& step, const std::u32string& s) {
    std::vector<piece_span> out;
    std::size_t pos = 0, b = 0, e = 0;
    auto next_match = [&](std::size_t from) {
      if (step.re) return step.re->search(s, from, b, e);
      if (step.each_char) {
        for (b = from; b < s.size() && !step.each_char(s[b]); ++b) {
        }
        e = b + 1;
        return b < s.size();
      }
      b = s.find(step.literal, from);
      e = b + step.literal.size();
      return b != std::u32string::npos;
    };
    for (std::size_t from = 0; from <= s.size() && next_match(from);) {
      if (e == b) {  // empty: look from the next character on
        from = b + 1;
        continue;
      }
      if (b > pos) out.push_back({pos, b, false});
      out.push_back({b, e, true});
      pos = from = e;
    }
    if (pos < s.size()) out.push_back({pos, s.size(), false});
    return out;
  }

  // A Split pre-tokenizer (the Hugging Face tokenizers' semantics: inverted, matches become the
  // pieces between and the other way round; then the behavior says where each match goes).
  static void split(const pretokenizer_step& step, const std::u32string& s, std::vector<std::u32string>& out) {
    auto spans = find_matches(step, s);
    if (step.invert)
      for (auto& p : spans) p.matched = !p.matched;
    std::vector<piece_span> kept;
    bool previous = false;
    switch (step.behavior) {
      case split_behavior::removed:
        for (auto& p : spans)
          if (!p.matched) kept.push_back(p);
        break;
      case split_behavior::isolated:
        kept = spans;
        break;
      case split_behavior::merged_with_previous:  // a match joins the piece before it
        for (auto& p : spans) {
          if (p.matched && !previous && !kept.empty()) kept.back().end = p.end;
          else kept.push_back(p);
          previous = p.matched;
        }
        break;
      case split_behavior::merged_with_next:  // a match joins the piece after it
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
          if (it->matched && !previous && !kept.empty()) kept.back().begin = it->begin;
          else kept.push_back(*it);
          previous = it->matched;
        }
        std::reverse(kept.begin(), kept.end());
        break;
      case split_behavior::contiguous:  // runs of matches become one piece
        for (std::size_t i = 0; i < spans.size(); ++i) {
          if (i > 0 && spans[i].matched == previous) kept.back().end = spans[i].end;
          else kept.push_back(spans[i]);
          previous = spans[i].matched;
        }
        break;
    }
    for (auto& p : kept) out.push_back(s.substr(p.begin, p.end - p.begin));
  }

  // A word's first symbols: each character's token, or its bytes' tokens (byte_fallback), or
  // the unknown token (consecutive ones fused with fuse_unk).
  void initial_symbols(const std::u32string& word, std::vector<std::int32_t>& sym) const {
    bool last_unk = false;
    std::string ch;
    for (char32_t c : word) {
      ch.clear();
      utf8_append(ch, c);
      if (auto it = vocab.find(ch); it != vocab.end()) {
        sym.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback) {
        const std::size_t before = sym.size();
        for (unsigned char byte : ch) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", byte);
          auto b = vocab.find(name);
          if (b == vocab.end()) {
            sym.resize(before);
            break;
          }
          sym.push_back(b->second);
        }
        if (sym.size() > before) {
          last_unk = false;
          continue;
        }
      }
      if (!unk_id) fail("no token for '" + ch + "' and the model has no unk_token");
      if (!(fuse_unk && last_unk)) sym.push_back(*unk_id);
      last_unk = true;
    }
  }

  void bpe_word(const std::u32string& word, std::vector<std::int32_t>& out) const {
    constexpr std::size_t longest_cached = 256;  // characters: a cache of words, not of texts
    std::string key = utf8_encode(word);
    const bool cacheable = word.size() <= longest_cached;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mu);
      auto it = word_cache.find(key);
      if (it != word_cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> ids;
    auto whole = vocab.find(key);
    if (ignore_merges && whole != vocab.end()) {
      ids.push_back(whole->second);
    } else {
      initial_symbols(word, ids);
      merges.merge_all(ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (!cacheable) return;
    std::lock_guard<std::mutex> lock(cache_mu);
    if (word_cache.size() > 200000) word_cache.clear();
    word_cache.emplace(std::move(key), std::move(ids));
  }

  void encode_segment(std::string_view text, std::vector<std::int32_t>& out) const {
    if (text.empty()) return;
    for (auto& word : pretokenize(normalize(normalizers, utf8_decode(text)))) {
      if (word.empty()) continue;
      if (wordpiece) wordpiece->encode_word(word, out);
      else bpe_word(word, out);
    }
  }

  // The added token starting at `pos`, longest first; -1 if none.
  // A byte trie of the added tokens' texts (Gemma 3 has 6,415 of them: trying each at every
  // position of a text was most of the time its encoding took).
  struct trie_node {
    std::vector<std::pair<unsigned char, int>> kids;  // sorted by byte
    int token = -1;                                   // index into added ending here
  };
  std::vector<trie_node> added_trie{trie_node{}};

  void index_added(int index) {
    int node = 0;
    for (unsigned char c : added[std::size_t(index)].content) {
      auto& kids = added_trie[std::size_t(node)].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, 0));
      if (it != kids.end() && it->first == c) {
        node = it->second;
        continue;
      }
      const int child = int(added_trie.size());
      kids.insert(it, {c, child});
      added_trie.emplace_back();
      node = child;
    }
    if (added_trie[std::size_t(node)].token < 0) added_trie[std::size_t(node)].token = index;  // the first of equal texts
  }

  int added_at(std::string_view text, std::size_t pos) const {
    int best = -1, node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const auto& kids = added_trie[std::size_t(node)].kids;
      const auto c = static_cast<unsigned char>(text[i]);
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, 0));
      if (it == kids.end() || it->first != c) break;
      node = it->second;
      if (added_trie[std::size_t(node)].token >= 0) best = added_trie[std::size_t(node)].token;  // the longest so far
    }
    return best;
  }
};

tokenizer::tokenizer(std::unique_ptr<impl> p) : p_(std::move(p)) {}
tokenizer::~tokenizer() = default;

std::unique_ptr<tokenizer> tokenizer::load(const std::string& path) {
  auto t = from_json(read_regular_file(path, max_tokenizer_file_bytes, "tokenizer.json"), path);
  const auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(config)) {
    const json c = parse_json(read_regular_file(config.string(), max_tokenizer_file_bytes, "tokenizer_config.json"), config.string());
    // transformers' default since 4.45: no clean-up unless the file asks for it.
    if (c.is_object() && c.contains("clean_up_tokenization_spaces")) {
      if (!c["clean_up_tokenization_spaces"].is_boolean())
        throw input_error(config.string() + ": clean_up_tokenization_spaces: expected true or false");
      t->p_->clean_up_spaces = c["clean_up_tokenization_spaces"].get<bool>();
    }
  }
  return t;
}

std::unique_ptr<tokenizer> tokenizer::from_json(const std::string& text, const std::string& source) {
  return from_document(parse_json(text, source), source);
}

std::unique_ptr<tokenizer> tokenizer::from_document(const json& j, const std::string& source) {
  auto p = std::make_unique<impl>();
  p->source = source;
  try {
    p->parse_model(j.at("model"));
    parse_normalizer(j.value("normalizer", json()), p->source, p->normalizers);
    p->parse_pretokenizer(j.value("pre_tokenizer", json()));
    parse_decoder(j.value("decoder", json()), p->source, p->decoders);
    p->parse_post_processor(j.value("post_processor", json()));
    for (auto& a : j.value("added_tokens", json::array())) {
      added_token t{a.at("content").get<std::string>(), a.at("id").get<std::int32_t>(), a.value("special", false),
                    a.value("lstrip", false), a.value("rstrip", false)};
      p->add_token(t.content, t.id);
      if (t.special) p->special_ids.insert(t.id);
      p->added_by_id[t.id] = p->added.size();
      p->added.push_back(std::move(t));
      if (!p->added.back().content.empty()) p->index_added(int(p->added.size()) - 1);
    }
    p->index_merges();
  } catch (const json::exception& e) {
    throw input_error(source + ": malformed tokenizer.json: " + e.what());
  }
  return std::unique_ptr<tokenizer>(new tokenizer(std::move(p)));
}

std::vector<std::int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<std::int32_t> out;
  if (add_special_tokens) out = p_->prefix_ids;
  std::size_t seg = 0, pos = 0;
  while (pos < text.size()) {
    int a = p_->added.empty() ? -1 : p_->added_at(text, pos);
    if (a < 0) {
      ++pos;
      continue;
    }
    const added_token& t = p_->added[std::size_t(a)];
    std::size_t seg_end = pos;
    if (t.lstrip)
      while (seg_end > seg && is_space(static_cast<unsigned char>(text[seg_end - 1]))) --seg_end;
    p_->encode_segment(text.substr(seg, seg_end - seg), out);
    out.push_back(t.id);
    pos += t.content.size();
    if (t.rstrip)
      while (pos < text.size() && is_space(static_cast<unsigned char>(text[pos]))) ++pos;
    seg = pos;
  }
  p_->encode_segment(text.substr(seg), out);
  if (add_special_tokens) out.insert(out.end(), p_->suffix_ids.begin(), p_->suffix_ids.end());
  return out;
}

// The Hugging Face tokenizers' decode: every token (added ones too) through the decoder chain,
// each step on the list of tokens in turn; the ByteLevel step leaves added tokens as they are
// (their text is not byte symbols). Fuse joins the list into one token.
std::string tokenizer::decode_bytes(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> t;
  std::vector<bool> added;
  for (std::int32_t id : ids) {
    if (skip_special_tokens && p_->special_ids.count(id)) continue;
    if (id < 0 || std::size_t(id) >= p_->id_to_token.size()) continue;  // unknown ids decode to nothing
    t.push_back(p_->id_to_token[std::size_t(id)]);
    added.push_back(p_->added_by_id.count(id) != 0);
  }
  return run_decoders(p_->decoders, std::move(t), std::move(added));
}

std::string tokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
  return utf8_sanitize(decode_bytes(ids, skip_special_tokens));
}

std::string tokenizer::detokenize(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
  std::string s = decode(ids, skip_special_tokens);
  if (p_->clean_up_spaces) clean_up_tokenization(s, false);
  return s;
}

std::optional<std::int32_t> tokenizer::token_id(std::string_view token) const {
  auto it = p_->vocab.find(std::string(token));
  if (it == p_->vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> tokenizer::token_text(std::int32_t id) const {
  if (id < 0 || std::size_t(id) >= p_->id_to_token.size()) return std::nullopt;
  return p_->id_to_token[std::size_t(id)];
}

bool tokenizer::is_special(std::int32_t id) const { return p_->special_ids.count(id) != 0; }

std::int32_t tokenizer::vocab_size() const { return std::int32_t(p_->id_to_token.size()); }

// Text of ids[prefix_, read_) and of ids[prefix_, end): the delta is what the new ids added.
std::pair<std::string, std::string> incremental_detokenizer::window_texts(const tokenizer& tok,
                                                                          std::span<const std::int32_t> ids) const {
  const std::vector<std::int32_t> before(ids.begin() + long(prefix_), ids.begin() + long(read_));
  const std::vector<std::int32_t> window(ids.begin() + long(prefix_), ids.end());
  return {tok.decode_bytes(before, skip_special_), tok.decode_bytes(window, skip_special_)};
}

std::string incremental_detokenizer::next(const tokenizer& tok, std::span<const std::int32_t> ids) {
  auto [prefix_text, new_text] = window_texts(tok, ids);
  if (new_text.size() <= prefix_text.size() || new_text.compare(0, prefix_text.size(), prefix_text) != 0) return {};
  std::string delta = new_text.substr(prefix_text.size());
  // Wait only while the newest token ends inside a character that a later token can complete;
  // bytes that can never form a character are emitted at once as U+FFFD, as the reference
  // detokenizers do (waiting on them stalled the stream and grew the window every step).
  if (utf8_incomplete_tail(delta) != 0) return {};
  prefix_ = read_;
  read_ = ids.size();
  return utf8_complete_prefix(delta) == delta.size() ? delta : utf8_sanitize(delta);
}

std::string incremental_detokenizer::flush(const tokenizer& tok, std::span<const std::int32_t> ids) {
  auto [prefix_text, new_text] = window_texts(tok, ids);
  prefix_ = read_ = ids.size();
  if (new_text.size() <= prefix_text.size()) return {};
  return utf8_sanitize(new_text.substr(prefix_text.size()));
}

}  // namespace troupe::tokenizer
