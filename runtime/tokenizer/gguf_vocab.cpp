#include "runtime/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <tuple>
#include <vector>

#include "runtime/common/error.h"

namespace troupe::tokenizer {

namespace {

using json = nlohmann::json;

const json& need(const json& m, const std::string& key, const std::string& source) {
  auto it = m.find(key);
  if (it == m.end()) throw input_error(source + ": metadata '" + key + "' is missing, so the file has no tokenizer");
  return *it;
}

// The pre-tokenizer regexes of the tokenizer.ggml.pre names this loader knows, as the families'
// tokenizer.json files write them: a Split (Isolated) by each, in order, then ByteLevel.
const std::vector<std::pair<std::string, std::vector<std::string>>>& known_pre_tokenizers() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> known = {
      {"llama-bpe",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"qwen2",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"deepseek-v3",  // digits, then runs of CJK ideographs and kana, then the rest
       {R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)" "\r\n"
        R"(]*|\s*[)" "\r\n" R"(]+|\s+(?!\S)|\s+)"}},
      {"tekken",  // Mistral Nemo's and later Mistral models': o200k's letter cases, single digits, no contractions
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {"gpt-4o",  // o200k: gpt-oss's and GPT-4o's
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  return known;
}

const std::vector<std::string>* pre_regexes(const std::string& pre) {
  const std::string name = pre == "llama3" ? "llama-bpe" : pre;  // llama.cpp reads both
  for (const auto& [n, res] : known_pre_tokenizers())
    if (n == name) return &res;
  return nullptr;
}

std::string known_pre_names() {
  std::string out = "default, gpt2";
  for (const auto& [n, res] : known_pre_tokenizers()) out += ", " + n;
  return out;
}

json template_processing(int bos_id, const std::string& bos) {
  return {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"pair", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
}

}  // namespace

namespace {

// A gpt2 (byte-level BPE) vocabulary: its merges and pre-tokenizer, as tokenizer.json has them.
json bpe_from_gguf(const json& m, const std::string& source, const json& vocab, json out) {
  json merges = json::array();
  for (auto& mg : need(m, "tokenizer.ggml.merges", source)) merges.push_back(mg);
  const std::string pre = m.value("tokenizer.ggml.pre", std::string("default"));
  // What the families' tokenizer.json files carry that GGUF does not: Qwen2's NFC, and Llama 3's
  // and Tekken's ignore_merges (a word in the vocabulary is one token; llama.cpp does the same
  // for those names).
  out["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
  const bool ignore_merges = pre == "llama-bpe" || pre == "llama3" || pre == "tekken";
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    out["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  } else if (const auto* res = pre_regexes(pre)) {
    json steps = json::array();
    for (const auto& re : *res) steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}});
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    out["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  } else {
    throw input_error(source + ": tokenizer.ggml.pre is '" + pre + "'; known: " + known_pre_names());
  }
  out["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  out["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"byte_fallback", false}, {"ignore_merges", ignore_merges}};
  return out;
}

// A llama (SentencePiece) vocabulary as a byte-fallback BPE.
json sentencepiece_from_gguf(const json& m, const std::string& source, const std::vector<std::string>& text,
                                    const std::vector<int>& types, const json& vocab, json out) {
  json merges = json::array();
  // SentencePiece: every split of a normal piece into two pieces is a merge, ranked by the
  // score of the piece it makes (higher first), then by the pieces' ids.
  const json& scores = need(m, "tokenizer.ggml.scores", source);
  if (!scores.is_array() || scores.size() != text.size()) throw input_error(source + ": tokenizer.ggml.scores must have one score per token");
  std::vector<std::tuple<double, std::size_t, std::size_t, std::string, std::string>> found;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (types[i] != 1 && types[i] != 4) continue;  // user-defined pieces (Gemma's runs of spaces) are merged into too
    const std::string& piece = text[i];
    for (std::size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) continue;  // not inside a UTF-8 character
      const std::string left = piece.substr(0, cut), right = piece.substr(cut);
      auto a = vocab.find(left), b = vocab.find(right);
      if (a == vocab.end() || b == vocab.end()) continue;
      found.emplace_back(-scores[i].get<double>(), a->get<std::size_t>(), b->get<std::size_t>(), left, right);
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) {
    return std::tie(std::get<0>(x), std::get<1>(x), std::get<2>(x)) < std::tie(std::get<0>(y), std::get<1>(y), std::get<2>(y));
  });
  for (auto& f : found) merges.push_back(json::array({std::get<3>(f), std::get<4>(f)}));
  std::string unk = "<unk>";
  if (auto u = m.find("tokenizer.ggml.unknown_token_id"); u != m.end() && u->is_number_integer() && u->get<std::size_t>() < text.size())
    unk = text[u->get<std::size_t>()];
  // Gemma's files say add_space_prefix false: spaces become "▁", none is prepended (or stripped).
  bool prefix = true;
  if (auto p = m.find("tokenizer.ggml.add_space_prefix"); p != m.end() && p->is_boolean()) prefix = p->get<bool>();
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  out["normalizer"] = prefix ? json{{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}} : replace;
  out["pre_tokenizer"] = nullptr;
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  out["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  out["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", unk}, {"fuse_unk", true},
                  {"byte_fallback", true}, {"ignore_merges", false}};
  return out;
}

}  // namespace

json tokenizer_json_from_gguf(const json& m, const std::string& source) {
  const json& kind = need(m, "tokenizer.ggml.model", source);
  const json& tokens = need(m, "tokenizer.ggml.tokens", source);
  if (!kind.is_string() || !tokens.is_array()) throw input_error(source + ": tokenizer.ggml.model/tokens have the wrong type");
  const std::string model = kind.get<std::string>();
  if (model != "gpt2" && model != "llama")
    throw input_error(source + ": tokenizer.ggml.model is '" + model + "'; GGUF tokenizers of kind gpt2 (BPE) and llama (SentencePiece) are read");
  std::vector<std::string> text;
  for (auto& t : tokens) {
    if (!t.is_string()) throw input_error(source + ": tokenizer.ggml.tokens holds a non-string");
    text.push_back(t.get<std::string>());
  }
  std::vector<int> types(text.size(), 1);
  if (auto tt = m.find("tokenizer.ggml.token_type"); tt != m.end()) {
    if (!tt->is_array() || tt->size() != text.size())
      throw input_error(source + ": tokenizer.ggml.token_type must have one entry per token");
    for (std::size_t i = 0; i < text.size(); ++i) types[i] = (*tt)[i].get<int>();
  }
  json vocab = json::object(), added = json::array();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (vocab.contains(text[i])) continue;  // a duplicate piece keeps its first id, as SentencePiece does
    vocab[text[i]] = i;
    if (types[i] == 2 || types[i] == 3 || types[i] == 4)  // llama.cpp matches the unknown piece in text too
      added.push_back({{"id", i}, {"content", text[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[i] != 4}});
  }
  const bool llama = model == "llama";
  bool add_bos = llama;
  if (auto b = m.find("tokenizer.ggml.add_bos_token"); b != m.end() && b->is_boolean()) add_bos = b->get<bool>();
  json out = {{"version", "1.0"}, {"added_tokens", added}};
  if (add_bos) {
    auto b = m.find("tokenizer.ggml.bos_token_id");
    if (b == m.end() || !b->is_number_integer() || b->get<std::int64_t>() < 0 || b->get<std::size_t>() >= text.size())
      throw input_error(source + ": tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is not a token");
    out["post_processor"] = template_processing(b->get<int>(), text[b->get<std::size_t>()]);
  } else {
    out["post_processor"] = nullptr;
  }
  if (!llama) return bpe_from_gguf(m, source, vocab, std::move(out));
  return sentencepiece_from_gguf(m, source, text, types, vocab, std::move(out));
}

namespace {

// ByteLevel alone, or Splits by one of llama.cpp's known regexes then ByteLevel: its name.
std::string byte_level_pre_name(const json& pre, const std::string& source) {
  auto byte_level = [](const json& p) { return p.is_object() && p.value("type", "") == "ByteLevel"; };
  if (byte_level(pre)) return "gpt-2";  // llama.cpp's name for GPT-2's regex (it refuses "gpt2")
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() >= 2 && byte_level(pre["pretokenizers"].back())) {
    std::vector<std::string> splits;  // each an Isolated Split by a regex
    for (std::size_t i = 0; i + 1 < pre["pretokenizers"].size(); ++i) {
      const json& p = pre["pretokenizers"][i];
      const bool isolated_regex = p.is_object() && p.value("type", "") == "Split" && p.value("behavior", "") == "Isolated" &&
                                  !p.value("invert", false) && p.contains("pattern") && p["pattern"].contains("Regex");
      splits.push_back(isolated_regex ? p["pattern"]["Regex"].get<std::string>() : std::string());
    }
    for (const auto& [name, res] : known_pre_tokenizers())
      if (res == splits) return name;
    throw input_error(source + ": the pre-tokenizer's Split regexes are none of llama.cpp's " + known_pre_names() +
                      "; GGUF export cannot name them");
  }
  throw input_error(source + ": the pre-tokenizer is " + pre.dump().substr(0, 80) +
                    "; GGUF export writes ByteLevel BPE and SentencePiece-style BPE tokenizers");
}

bool replaces_spaces(const json& n) {
  return n.is_object() && n.value("type", "") == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
         n["pattern"].value("String", "") == " " && n.value("content", "") == "\u2581";
}

// SentencePiece's shape in tokenizer.json: spaces replaced by "▁" (Gemma), after a "▁" prepended
// (Llama 2); no pre-tokenizer, or a Split on " " that the replacement has left nothing to split.
// Whether it prepends; nullopt when the tokenizer is not of that shape.
std::optional<bool> sentencepiece_shape(const json& j) {
  const json none;
  const json& model = j["model"];
  const json& norm = j.contains("normalizer") ? j["normalizer"] : none;
  const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : none;
  if (!model.value("byte_fallback", false)) return std::nullopt;
  const bool no_split = pre.is_null() || (pre.is_object() && pre.value("type", "") == "Split" && pre.contains("pattern") &&
                                          pre["pattern"].is_object() && pre["pattern"].value("String", "") == " " &&
                                          !pre.value("invert", false));
  if (!no_split) return std::nullopt;
  if (replaces_spaces(norm)) return false;
  if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers") && norm["normalizers"].size() == 2) {
    const json& first = norm["normalizers"][0];
    if (first.is_object() && first.value("type", "") == "Prepend" && first.value("prepend", "") == "\u2581" &&
        replaces_spaces(norm["normalizers"][1]))
      return true;
  }
  return std::nullopt;
}

bool is_byte_piece(const std::string& p) {
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>' && std::isxdigit(static_cast<unsigned char>(p[3])) &&
         std::isxdigit(static_cast<unsigned char>(p[4]));
}

// Scores that order the pieces as the merges that make them are ordered: a piece ranks by its
// first merge; pieces no merge makes (characters, bytes, specials) score 0.
std::vector<float> scores_from_merges(const gguf_tokenizer& t, const json& vocab) {
  std::vector<float> scores(t.tokens.size(), 0.0f);
  std::vector<bool> made(t.tokens.size(), false);
  float rank = 0;
  for (const auto& m : t.merges) {
    rank += 1;
    const auto space = m.find(' ');
    const auto it = vocab.find(m.substr(0, space) + m.substr(space + 1));
    if (it == vocab.end()) continue;
    const auto id = it->get<std::size_t>();
    if (!made[id]) made[id] = true, scores[id] = -rank;
  }
  return scores;
}

}  // namespace

gguf_tokenizer gguf_tokenizer_from_json(const json& j, const std::string& source) {
  const json& model = j.contains("model") ? j["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object())
    throw input_error(source + ": the model is not BPE with a vocab; GGUF export writes BPE tokenizers only");
  gguf_tokenizer t;
  const auto prepends_space = sentencepiece_shape(j);
  t.model = prepends_space ? "llama" : "gpt2";
  t.pre = prepends_space ? "default" : byte_level_pre_name(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), source);
  std::size_t n = 0;  // added tokens may lie past the BPE vocabulary
  for (auto& [piece, id] : model["vocab"].items()) n = std::max(n, id.get<std::size_t>() + 1);
  const json added = j.value("added_tokens", json::array());
  for (auto& a : added) n = std::max(n, a.at("id").get<std::size_t>() + 1);
  t.tokens.assign(n, std::string());
  t.token_type.assign(n, 1);
  for (auto& [piece, id] : model["vocab"].items()) t.tokens[id.get<std::size_t>()] = piece;
  for (auto& a : added) {
    const auto id = a.at("id").get<std::size_t>();
    t.tokens[id] = a.at("content").get<std::string>();
    t.token_type[id] = a.value("special", false) ? 3 : 4;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (t.tokens[i].empty()) throw input_error(source + ": token id " + std::to_string(i) + " has no piece; GGUF needs every id below the largest");
  for (auto& m : model.value("merges", json::array()))
    t.merges.push_back(m.is_array() ? m[0].get<std::string>() + " " + m[1].get<std::string>() : m.get<std::string>());
  if (prepends_space) {
    t.add_space_prefix = *prepends_space;
    for (std::size_t i = 0; i < n; ++i)
      if (t.token_type[i] == 1 && is_byte_piece(t.tokens[i])) t.token_type[i] = 6;
    if (const std::string unk = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
        model["vocab"].contains(unk)) {
      t.unknown_token_id = model["vocab"][unk].get<std::int32_t>();
      if (t.token_type[std::size_t(t.unknown_token_id)] == 1 || t.token_type[std::size_t(t.unknown_token_id)] == 3)
        t.token_type[std::size_t(t.unknown_token_id)] = 2;
    }
    t.scores = scores_from_merges(t, model["vocab"]);
    t.merges.clear();  // llama.cpp's SentencePiece vocabulary merges by the scores
  }
  // A post-processor that prepends a token to a single sequence (TemplateProcessing, alone or in a
  // Sequence), as GGUF's add_bos_token says; which token is tokenizer.ggml.bos_token_id's job.
  const json none;
  const json& post = j.contains("post_processor") ? j["post_processor"] : none;
  auto prepends = [](const json& p) {
    return p.is_object() && p.value("type", "") == "TemplateProcessing" && p.contains("single") && !p["single"].empty() &&
           p["single"][0].contains("SpecialToken");
  };
  t.add_bos_token = prepends(post);
  if (post.is_object() && post.value("type", "") == "Sequence" && post.contains("processors"))
    for (auto& p : post["processors"]) t.add_bos_token = t.add_bos_token || prepends(p);
  return t;
}

}  // namespace troupe::tokenizer
