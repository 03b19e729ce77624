// Token masks of grammar states: which tokens of a vocabulary may come next. The trie walk
// (token_trie.h) answers it for any state; a grammar revisits the same states constantly (every
// character inside a JSON string is the same state), so masks are cached per grammar, bounded
// by bytes and evicted least recently used first.
//
// Contract: vocabulary(token_bytes, eos_ids) takes each id's bytes as it adds to a decoded text
// (empty for special tokens: never allowed by a grammar) and the ids that end generation.
// masks::of(matcher) is the tokens whose every byte the matcher accepts, plus the EOS ids where
// the matcher's state is a complete sentence, and nothing else. Thread-safe. One masks object
// serves one grammar (its walker remembers that grammar's states).
//
// Why a walker of its own: a miss walks every trie node the state allows, thousands inside a
// JSON string. Stacks here are interned nodes (position, parent), so equal stacks are equal
// ids; states are interned sets of them, and each (state, byte) step is remembered. Inside a
// string every ordinary byte leads back to the same state, so most of a walk is table lookups
// and nothing is allocated per trie node.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/structured/grammar.h"
#include "runtime/structured/token_trie.h"

namespace troupe::structured {

struct vocabulary {
  vocabulary(std::vector<std::string> token_bytes, std::vector<std::int32_t> eos_ids);
  std::vector<std::string> bytes;
  std::vector<std::int32_t> eos;
  token_trie trie;
  std::size_t size() const { return bytes.size(); }
};

class masks {
 public:
  masks(std::shared_ptr<const vocabulary> vocab, std::size_t max_bytes = std::size_t(32) << 20);
  ~masks();

  std::shared_ptr<const token_mask> of(const grammar_matcher& m);
  // Without the cache: the walk itself (what a miss costs, for the benchmark and tests).
  token_mask compute(const grammar_matcher& m) const;
  const vocabulary& vocab() const { return *vocab_; }

  struct counters {
    std::uint64_t hits = 0, misses = 0;
    std::size_t entries = 0;
  };
  counters stats() const;

 private:
  class walker;
  std::shared_ptr<const vocabulary> vocab_;
  mutable std::unique_ptr<walker> walker_;  // under walk_mu_
  mutable std::mutex walk_mu_;
  std::size_t capacity_;  // entries
  mutable std::mutex mu_;
  using entry = std::pair<std::string, std::shared_ptr<const token_mask>>;
  std::list<entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<entry>::iterator> index_;
  counters stats_;
};

}  // namespace troupe::structured
