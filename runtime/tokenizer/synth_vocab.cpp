#include "runtime/tokenizer/synth_vocab.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::tokenizer {

namespace {

const char* const llama3_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text the first merges are learned from: ordinary English about the system itself.
const char* const corpus = R"(
A language model turns a prompt into text one token at a time. The server that runs it has two
jobs that pull against each other: answer every user quickly, and keep the hardware busy. The
prompt is processed in one pass, called prefill, which is limited by arithmetic. Each new token
after that is a decode step, which reads all of the model's weights and the cached keys and
values of every earlier token, so it is limited by memory bandwidth. The cache of keys and
values grows with every token and with every user. A paged cache splits it into small blocks
that are allocated when a sequence grows and freed the moment it ends, so that many more
requests fit into the same memory. The scheduler decides at every step which sequences run and
how many tokens each of them may compute. New requests join the running batch at any step and
finished ones leave it. A long prompt is split into chunks so that the users who are already
reading their answers keep receiving tokens while it is being processed. When the memory runs
out, the scheduler pauses the newest request and computes it again later. The router chooses a
replica for each request, and the replicas report their load and the prefixes they hold. If a
worker dies, the requests it was serving move to another worker and continue where they were.
The quick brown fox jumps over the lazy dog. There are 365 days in a year and 24 hours in a day.
"What time is it?" she asked. "It's half past seven," he said, and they went on walking.
)";

struct trainer {
  std::vector<std::vector<std::string>> words;  // symbols per distinct word
  std::vector<int> counts;

  explicit trainer(const std::string& text) {
    regex re(llama3_pattern);
    std::u32string s = utf8_decode(text);
    std::map<std::string, int> freq;
    std::size_t pos = 0, b, e;
    while (pos < s.size() && re.search(s, pos, b, e) && e > b) {
      freq[bytes_to_symbols(utf8_encode(s.substr(b, e - b)))]++;
      pos = e;
    }
    for (auto& [w, c] : freq) {
      std::vector<std::string> sym;
      for (char32_t ch : utf8_decode(w)) {
        std::string one;
        utf8_append(one, ch);
        sym.push_back(one);
      }
      words.push_back(std::move(sym));
      counts.push_back(c);
    }
  }

  // The most frequent adjacent pair (ties: smallest pair), or false when none occurs twice.
  bool best_pair(std::pair<std::string, std::string>& out) const {
    std::map<std::pair<std::string, std::string>, int> pc;
    for (std::size_t w = 0; w < words.size(); ++w)
      for (std::size_t i = 0; i + 1 < words[w].size(); ++i) pc[{words[w][i], words[w][i + 1]}] += counts[w];
    int best = 1;
    for (auto& [p, c] : pc)
      if (c > best) best = c, out = p;
    return best > 1;
  }

  void apply(const std::pair<std::string, std::string>& p) {
    for (auto& w : words)
      for (std::size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i] == p.first && w[i + 1] == p.second) {
          w[i] += w[i + 1];
          w.erase(w.begin() + long(i) + 1);
        }
  }
};

bool letters_only(const std::string& sym) {
  std::string bytes = symbols_to_bytes(sym);
  if (bytes.empty()) return false;
  for (char c : bytes)
    if (!((c >= 'a' && c <= 'z'))) return false;
  return true;
}

bool word_start(const std::string& sym) {
  std::string bytes = symbols_to_bytes(sym);
  if (bytes.size() < 2 || bytes[0] != ' ') return false;
  return letters_only(bytes_to_symbols(bytes.substr(1)));
}

}  // namespace

synth_specials synth_special_ids(int vocab_size) {
  return {vocab_size - 5, vocab_size - 4, vocab_size - 3, vocab_size - 2, vocab_size - 1};
}

std::string synth_tokenizer_json(int vocab_size, std::uint64_t seed) {
  using nlohmann::json;
  const int regular = vocab_size - 5;
  std::vector<std::string> tokens;
  std::set<std::string> known;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_char(std::uint8_t(b)));
    tokens.push_back(s);
    known.insert(s);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  trainer t(corpus);
  std::pair<std::string, std::string> p;
  while (int(tokens.size()) < regular && t.best_pair(p)) {
    t.apply(p);
    if (known.insert(p.first + p.second).second) {
      tokens.push_back(p.first + p.second);
      merges.push_back(p);
    }
  }
  // Fill the rest with pseudo-words: a word start (" ab") followed by a lowercase piece.
  std::mt19937_64 rng(seed ^ 0x7e0u);
  std::vector<std::string> starts, tails;
  for (auto& tok : tokens) {
    if (word_start(tok)) starts.push_back(tok);
    if (letters_only(tok)) tails.push_back(tok);
  }
  for (char c = 'a'; c <= 'z'; ++c) {
    std::string s = bytes_to_symbols(std::string(" ") + c);
    if (known.insert(s).second && int(tokens.size()) < regular) {
      tokens.push_back(s);
      merges.push_back({bytes_to_symbols(" "), bytes_to_symbols(std::string(1, c))});
      starts.push_back(s);
    }
  }
  while (int(tokens.size()) < regular) {
    const auto& a = (rng() % 3 == 0) ? tails[rng() % tails.size()] : starts[rng() % starts.size()];
    const auto& b = tails[rng() % tails.size()];
    std::string joined = a + b;
    if (symbols_to_bytes(joined).size() > 12 || !known.insert(joined).second) continue;
    tokens.push_back(joined);
    merges.push_back({a, b});
    (word_start(joined) ? starts : tails).push_back(joined);
  }
  const synth_specials sp = synth_special_ids(vocab_size);
  const std::pair<int, const char*> specials[] = {{sp.bos, "<|begin_of_text|>"}, {sp.eos, "<|end_of_text|>"},
      {sp.start_header, "<|start_header_id|>"}, {sp.end_header, "<|end_header_id|>"}, {sp.eot, "<|eot_id|>"}};

  json vocab = json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  json merge_list = json::array();
  for (auto& m : merges) merge_list.push_back({m.first, m.second});
  json added = json::array();
  for (auto& [id, content] : specials)
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {
          {{"type", "Split"}, {"pattern", {{"Regex", llama3_pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"pair", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 1}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
          {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {sp.bos}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                 {"vocab", vocab}, {"merges", merge_list}}},
  };
  return tok.dump() + "\n";
}

std::string synth_tokenizer_config_json(int vocab_size) {
  (void)vocab_size;
  nlohmann::json c = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"bos_token", "<|begin_of_text|>"},
      {"eos_token", "<|end_of_text|>"},
      {"model_max_length", 4096},
      {"clean_up_tokenization_spaces", false},
      {"chat_template",
       "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
       "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
       "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
  };
  return c.dump(2) + "\n";
}

}  // namespace troupe::tokenizer
