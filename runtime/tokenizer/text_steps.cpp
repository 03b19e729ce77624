#include "runtime/tokenizer/text_steps.h"

#include "runtime/common/error.h"
#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::tokenizer {

using nlohmann::json;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
}

void clean_up_tokenization(std::string& s, bool do_not) {
  struct rule {
    const char *from, *to;
    bool wordpiece_only;
  };
  static const rule rules[] = {{" .", ".", false},    {" ?", "?", false},     {" !", "!", false},   {" ,", ",", false},
                               {" ' ", "'", false},   {" n't", "n't", false}, {" 'm", "'m", false}, {" do not", " don't", true},
                               {" 's", "'s", false},  {" 've", "'ve", false}, {" 're", "'re", false}};
  for (const rule& r : rules)
    if (do_not || !r.wordpiece_only) replace_all(s, r.from, r.to);
}

namespace {

std::string pattern_string(const json& pattern, const std::string& where) {
  if (pattern.contains("String")) return pattern["String"].get<std::string>();
  throw input_error(where + ": only String patterns are supported here");
}

// The WordPiece decoder's text for the token at `index` of those decoded: a space before it
// unless it is the first or continues a word (its prefix removed), then with `cleanup` the
// library's clean-up, with its " do not" rule.
std::string wordpiece_token(std::size_t index, std::string token, const std::string& prefix, bool cleanup) {
  if (index != 0) {
    if (!prefix.empty() && token.compare(0, prefix.size(), prefix) == 0) token.erase(0, prefix.size());
    else token.insert(0, " ");
  }
  if (cleanup) clean_up_tokenization(token, true);
  return token;
}

}  // namespace

void parse_normalizer(const json& n, const std::string& source, std::vector<normalizer_step>& normalizers) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (auto& s : n.at("normalizers")) parse_normalizer(s, source, normalizers);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" || type == "Lowercase") {
    const auto kind = type == "NFC"    ? normalizer_step::nfc
                      : type == "NFD"  ? normalizer_step::nfd
                      : type == "NFKC" ? normalizer_step::nfkc
                      : type == "NFKD" ? normalizer_step::nfkd
                                       : normalizer_step::lowercase;
    normalizers.push_back({kind, "", ""});
  } else if (type == "Strip") {
    normalizers.push_back({normalizer_step::strip, "", "", n.value("strip_left", true), n.value("strip_right", true)});
  } else if (type == "BertNormalizer") {
    normalizer_step b{normalizer_step::bert};
    b.bert_options.clean_text = n.value("clean_text", true);
    b.bert_options.handle_chinese_chars = n.value("handle_chinese_chars", true);
    b.bert_options.lowercase = n.value("lowercase", true);
    const json& sa = n.contains("strip_accents") ? n["strip_accents"] : json();
    b.bert_options.strip_accents = sa.is_boolean() ? sa.get<bool>() : b.bert_options.lowercase;  // null: as lowercase
    normalizers.push_back(b);
  } else if (type == "Prepend") {
    normalizers.push_back({normalizer_step::prepend, n.at("prepend").get<std::string>(), ""});
  } else if (type == "Replace") {
    normalizers.push_back({normalizer_step::replace, pattern_string(n.at("pattern"), source + ": normalizer Replace"), n.at("content").get<std::string>()});
  } else {
    throw input_error(source + ": normalizer '" + type + "' is not supported (NFC, NFD, NFKC, NFKD, Lowercase, Strip, BertNormalizer, Prepend, Replace, Sequence)");
  }
}

std::u32string normalize(const std::vector<normalizer_step>& normalizers, std::u32string s) {
  for (auto& n : normalizers) {
    if (n.kind == normalizer_step::nfc) {
      s = nfc(s);
    } else if (n.kind == normalizer_step::nfd) {
      s = nfd(s);
    } else if (n.kind == normalizer_step::nfkc) {
      s = nfkc(s);
    } else if (n.kind == normalizer_step::nfkd) {
      s = nfkd(s);
    } else if (n.kind == normalizer_step::lowercase) {
      s = lowercase(s);
    } else if (n.kind == normalizer_step::bert) {
      s = bert_normalize(s, n.bert_options);
    } else if (n.kind == normalizer_step::strip) {
      std::size_t b = 0, e = s.size();
      while (n.left && b < e && is_space(s[b])) ++b;
      while (n.right && e > b && is_space(s[e - 1])) --e;
      s = s.substr(b, e - b);
    } else if (n.kind == normalizer_step::prepend) {
      if (!s.empty()) s = utf8_decode(n.a) + s;
    } else {
      std::string u = utf8_encode(s);
      replace_all(u, n.a, n.b);
      s = utf8_decode(u);
    }
  }
  return s;
}

void parse_decoder(const json& d, const std::string& source, std::vector<decoder_step>& decoders) {
  if (d.is_null()) return;
  std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (auto& x : d.at("decoders")) parse_decoder(x, source, decoders);
  } else if (type == "ByteLevel") {
    decoders.push_back({decoder_step::byte_level});
  } else if (type == "Replace") {
    decoders.push_back({decoder_step::replace, pattern_string(d.at("pattern"), source + ": decoder Replace"), d.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    decoders.push_back({decoder_step::byte_fallback});
  } else if (type == "Fuse") {
    decoders.push_back({decoder_step::fuse});
  } else if (type == "Strip") {
    decoder_step s{decoder_step::strip, d.value("content", " ")};
    s.start = d.value("start", 0);
    s.stop = d.value("stop", 0);
    decoders.push_back(s);
  } else if (type == "Metaspace") {
    decoder_step s{decoder_step::metaspace, d.value("replacement", "\xe2\x96\x81")};
    std::string scheme = d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never");
    s.prepend = scheme != "never";
    decoders.push_back(s);
  } else if (type == "WordPiece") {
    decoder_step s{decoder_step::wordpiece, d.value("prefix", "##")};
    s.prepend = d.value("cleanup", true);
    decoders.push_back(s);
  } else {
    throw input_error(source + ": decoder '" + type + "' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece, Sequence)");
  }
}

std::string run_decoders(const std::vector<decoder_step>& decoders, std::vector<std::string> t, std::vector<bool> added) {
  for (auto& d : decoders) {
    switch (d.kind) {
      case decoder_step::byte_level:
        for (std::size_t i = 0; i < t.size(); ++i)
          if (!added[i]) t[i] = symbols_to_bytes(t[i]);
        break;
      case decoder_step::replace:
        for (auto& s : t) replace_all(s, d.a, d.b);
        break;
      case decoder_step::byte_fallback:
        for (auto& s : t)
          if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>')
            s = std::string(1, char(std::stoi(s.substr(3, 2), nullptr, 16)));
        break;
      case decoder_step::fuse: {
        std::string all;
        for (auto& s : t) all += s;
        t = {all};
        added = {false};
        break;
      }
      case decoder_step::strip:  // each token: up to `start` leading and `stop` trailing copies
        for (auto& s : t) {
          for (int k = 0; k < d.start && s.compare(0, d.a.size(), d.a) == 0; ++k) s.erase(0, d.a.size());
          for (int k = 0; k < d.stop && s.size() >= d.a.size() && s.compare(s.size() - d.a.size(), d.a.size(), d.a) == 0; ++k)
            s.erase(s.size() - d.a.size());
        }
        break;
      case decoder_step::wordpiece:
        for (std::size_t i = 0; i < t.size(); ++i) t[i] = wordpiece_token(i, std::move(t[i]), d.a, d.prepend);
        break;
      case decoder_step::metaspace:
        for (std::size_t i = 0; i < t.size(); ++i) {
          replace_all(t[i], d.a, " ");
          if (d.prepend && i == 0 && !t[i].empty() && t[i][0] == ' ') t[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (auto& s : t) out += s;
  return out;
}

}  // namespace troupe::tokenizer
