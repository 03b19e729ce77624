// A BPE model's merges by token id, and the merging of a word's symbols: the lowest-ranked
// adjacent pair first (leftmost among equals) until none applies, as the Hugging Face library
// merges. A heap of candidate merges over a linked list of symbols, so a long word (a
// SentencePiece model's whole line, which has no spaces to split at) costs n log n.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe::tokenizer {

class bpe_merges {
 public:
  bpe_merges() = default;
  // `pairs` in rank order; `vocab` every token (added ones too). A merge whose parts or result
  // the vocabulary lacks can never apply and is left out (the library refuses such a file).
  bpe_merges(const std::vector<std::pair<std::string, std::string>>& pairs,
             const std::unordered_map<std::string, std::int32_t>& vocab);

  // Merges `sym` (token ids) in place.
  void merge_all(std::vector<std::int32_t>& sym) const;

 private:
  struct rule {
    int rank;
    std::int32_t merged;
  };
  static std::uint64_t key(std::int32_t a, std::int32_t b) { return std::uint64_t(std::uint32_t(a)) << 32 | std::uint32_t(b); }
  std::unordered_map<std::uint64_t, rule> rules_;  // by the ids of the two parts
};

}  // namespace troupe::tokenizer
