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
//
// A miss is first assembled from fragments (fragment.h): each stack's top frames have a mask
// shared by every grammar of this vocabulary that spells them alike, and only their edge tokens
// (those that may run past the fragment) are stepped through the whole state. A request with a
// new schema then finds its strings, numbers and literals already walked. The stacks a rule's
// entry put on top (a character's dozen UTF-8 alternatives) are taken together, as the one stack
// from before the entry. Where a fragment has too many edge tokens, or a budget cut its walk,
// the state is walked whole; either way the mask is the same.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/structured/fragment.h"
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
  // `fragments`: shared with the other grammars of this vocabulary (a grammar_cache's); none: one
  // of its own.
  masks(std::shared_ptr<const vocabulary> vocab, std::size_t max_bytes = std::size_t(32) << 20,
        std::shared_ptr<fragment_cache> fragments = nullptr);
  ~masks();

  std::shared_ptr<const token_mask> of(const grammar_matcher& m);
  // Without the cache: the state walked whole (the reference the assembled masks equal, and
  // what a miss cost before fragments, for the benchmark and tests).
  token_mask compute(const grammar_matcher& m) const;
  // Without the cache: assembled from fragments where they serve, else walked whole.
  token_mask assemble(const grammar_matcher& m) const;
  const vocabulary& vocab() const { return *vocab_; }

  struct counters {
    std::uint64_t hits = 0, misses = 0;
    std::size_t entries = 0;
    std::uint64_t assembled = 0, walked = 0;  // misses answered from fragments, and walked whole
  };
  counters stats() const;

 private:
  class walker;
  struct top_fragment {
    std::size_t frames = 0;
    std::shared_ptr<const fragment_mask> mask;
  };
  walker& walker_for(const grammar& g) const;  // under walk_mu_
  const top_fragment& fragment_of(walker& w, const grammar_matcher::stack& s) const;  // under walk_mu_
  std::shared_ptr<const fragment_mask> walk_fragment(walker& w, const fragment& f) const;
  bool assemble(walker& w, const grammar_matcher& m, token_mask& mask) const;  // under walk_mu_

  std::shared_ptr<const vocabulary> vocab_;
  std::shared_ptr<fragment_cache> fragments_;
  mutable std::unique_ptr<walker> walker_;  // under walk_mu_
  // The fragment of each stack top seen, by its top frames' positions (under walk_mu_).
  struct top_key {
    std::array<std::int32_t, most_frames> positions{};  // top last
    std::uint8_t size = 0;
    friend bool operator==(const top_key&, const top_key&) = default;
  };
  struct top_key_hash {
    std::size_t operator()(const top_key& k) const {
      std::uint64_t h = k.size;
      for (std::int32_t p : k.positions) h = (h ^ std::uint32_t(p)) * 0x9e3779b97f4a7c15ULL;
      return std::size_t(h ^ (h >> 32));
    }
  };
  mutable std::unordered_map<top_key, top_fragment, top_key_hash> tops_;
  mutable fragment_scratch scratch_;  // choose_fragment's tables (under walk_mu_)
  mutable std::mutex walk_mu_;
  std::size_t capacity_;  // entries
  mutable std::mutex mu_;
  using entry = std::pair<std::string, std::shared_ptr<const token_mask>>;
  std::list<entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<entry>::iterator> index_;
  counters stats_;
  mutable std::atomic<std::uint64_t> assembled_{0}, walked_{0};
};

}  // namespace troupe::structured
