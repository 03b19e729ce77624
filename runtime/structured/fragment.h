// Fragments: the top of a matcher's stack as a grammar of its own, so that the token mask of a
// state can be assembled from parts computed once and shared by every grammar that has them.
//
// Why: a request that brings a new JSON Schema starts with every state new to its grammar, and a
// mask miss walks the vocabulary's trie (tens of microseconds here, milliseconds on a 150k
// vocabulary). Yet most of that walk is the same in every schema: inside a string, a number or a
// literal the tokens allowed do not depend on the schema around it. xgrammar's answer is a mask
// per grammar position split into tokens accepted whatever follows, tokens refused whatever
// follows, and the few that depend on what follows. Here the unit is a fragment: the top frames
// of a stack (the string's character, its repetition, its closing quote), named by a key that
// digests a spelling of its elements and the rules they reach with rule and class numbers
// renumbered, so two grammars with the same string rule have the same key and share one entry.
//
// Contract: choose_fragment(g, stack) picks the frames (top first) and computes the key; equal
// keys mean equal spellings, and equal spellings mean equal languages up to the horizon (no
// token is longer) and equal budgets. Only the bottom frame may end before its alternative does
// (limit); the fragment ends when its bottom frame does. A fragment_mask says,
// for a fragment, which tokens it accepts wholly (`inside`, whatever follows), and which may run
// past its end (`edge`, to be checked against the whole stack); every other token is refused
// in any context. fragment_cache holds them for one vocabulary, bounded by bytes, least
// recently used evicted; thread-safe.
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

// A fragment's spelling, digested: 128 bits of a hash seeded once per process. The spelling of
// a string or pattern fragment runs to kilobytes (every rule and byte class within the horizon),
// and keeping it as the key cost an allocation, a hash and a compare of it per lookup: most of a
// mask miss once the fragments were cached. Seeded, so no one can craft two fragments that
// collide; at 128 bits a collision by chance is not expected in the life of the universe, and
// would at worst let through a token that the matcher then refuses (the engine ends the output).
struct fragment_key {
  std::uint64_t a = 0, b = 0;
  friend bool operator==(const fragment_key&, const fragment_key&) = default;
  friend auto operator<=>(const fragment_key&, const fragment_key&) = default;
};
struct fragment_key_hash {
  std::size_t operator()(const fragment_key& k) const { return std::size_t(k.a); }
};

struct fragment {
  struct frame {
    std::int32_t pos = 0;
    std::int32_t limit = -1;  // the frame's alternative ends before this element; -1: where it ends
  };
  std::vector<frame> frames;  // top first
  fragment_key key;
};

inline constexpr int most_frames = 6;  // a fragment's frames at most, whatever the limits

struct fragment_limits {
  int max_frames = most_frames;  // at most most_frames
  int max_elements = 2048;  // elements of the frames and of the rules they reach within the horizon
  int horizon = 64;        // the longest token, in bytes: what lies further cannot change a mask
};

// choose_fragment's tables, kept by its caller between calls: it runs for every new stack top of
// every grammar (more than once per token of a new schema), and hash maps allocated per call
// were most of a mask miss. Indexed by rule and byte-class id; an entry counts only where its
// stamp is the current call's, so nothing is cleared between calls.
struct fragment_scratch {
  struct table {
    std::vector<std::int32_t> value;
    std::vector<std::uint32_t> stamp;
    void fit(std::size_t n) {
      if (value.size() >= n) return;
      value.resize(n);
      stamp.resize(n, 0);
    }
  };
  table distance, rule_number, class_number;
  std::vector<std::int32_t> work, order, classes;
  std::vector<std::pair<std::int32_t, std::int32_t>> undo;  // (rule, distance before; -1: not reached)
  std::uint32_t call = 0;
};

// `stack` is bottom first, its top a byte class (a matcher's stack) or a reference (a rule
// entered: the fragment starts with all its alternatives). `scratch`: none, tables of its own.
fragment choose_fragment(const grammar& g, const std::vector<std::int32_t>& stack, const fragment_limits& limits,
                         fragment_scratch* scratch = nullptr);

struct fragment_mask {
  token_mask inside;
  std::vector<std::int32_t> edge;
  int depth = 0;        // the deepest stack the fragment's walk held, in frames
  int stacks = 0;       // the most stacks it held at once
  bool usable = false;  // false: too many edge tokens, or a budget cut the walk: walk the state whole
};

class fragment_cache {
 public:
  explicit fragment_cache(std::size_t max_bytes = std::size_t(64) << 20) : max_bytes_(max_bytes) {}
  std::shared_ptr<const fragment_mask> find(const fragment_key& key);
  void put(const fragment_key& key, std::shared_ptr<const fragment_mask> m);
  struct counters {
    std::uint64_t hits = 0, misses = 0;
    std::size_t entries = 0, bytes = 0;
  };
  counters stats() const;

 private:
  static std::size_t cost(const fragment_mask& m);
  std::size_t max_bytes_;
  mutable std::mutex mu_;
  using entry = std::pair<fragment_key, std::shared_ptr<const fragment_mask>>;
  std::list<entry> lru_;  // most recent first
  std::unordered_map<fragment_key, std::list<entry>::iterator, fragment_key_hash> index_;
  counters stats_;
};

}  // namespace troupe::structured
