// The vocabulary as a byte trie, for constrained decoding: which tokens may come next, given an
// automaton over bytes in some state. Every constrained format (JSON Schema, regular
// expressions, GBNF) ends in the same question at every step, and asking it token by token costs
// the vocabulary's total length in automaton steps; the trie shares each prefix among the tokens
// that start with it and drops a whole subtree at the first byte the automaton refuses, so a
// step costs what the allowed prefixes hold (xgrammar and llguidance walk a trie the same way).
//
// Contract: token_trie(tokens) takes each token id's bytes (tokens[id], as the tokenizer
// decodes that token alone); an empty string is a token no automaton allows (special tokens:
// EOS is the caller's to allow in accepting states). allowed(step, start, mask) sets bit id of
// `mask` for each token whose every byte the automaton accepts from `start`, and clears the
// others (a mask of the vocabulary's size is reused, so a caller keeping one per sequence
// allocates it once). `step(state, byte)` returns the next state, or nothing where the byte is
// refused; it must not depend on anything but its arguments. Pure; a call allocates only a stack
// of depth max_token_bytes().
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::structured {

// One bit per token id.
class token_mask {
 public:
  explicit token_mask(std::size_t tokens = 0) : words_((tokens + 63) / 64, 0), size_(tokens) {}
  std::size_t size() const { return size_; }
  bool test(std::size_t id) const { return (words_[id / 64] >> (id % 64)) & 1; }
  void set(std::size_t id) { words_[id / 64] |= std::uint64_t(1) << (id % 64); }
  void clear() { std::fill(words_.begin(), words_.end(), 0); }
  token_mask& operator|=(const token_mask& o) {
    for (std::size_t i = 0; i < words_.size() && i < o.words_.size(); ++i) words_[i] |= o.words_[i];
    return *this;
  }
  std::size_t count() const;
  const std::vector<std::uint64_t>& words() const { return words_; }

 private:
  std::vector<std::uint64_t> words_;
  std::size_t size_;
};

class token_trie {
 public:
  explicit token_trie(const std::vector<std::string>& tokens);

  std::size_t vocab_size() const { return vocab_; }
  std::size_t nodes() const { return byte_.size(); }
  int max_token_bytes() const { return max_depth_; }

  template <class State, class Step>
  void allowed(Step&& step, const State& start, token_mask& mask) const;
  // The same walk for a caller that keeps the states itself: enter(depth, byte) steps from the
  // state it holds for depth - 1 into one for `depth` and says whether any survives.
  template <class Enter>
  void walk(Enter&& enter, token_mask& mask) const;
  // The walk of a fragment (fragment.h): enter(depth, byte) says of each node whether it is
  // followed (the tokens ending there go into `inside`), refused (its subtree skipped), or
  // leaves the fragment (every token of its subtree appended to `edge`, the subtree skipped).
  enum class verdict : std::uint8_t { refused, follow, leaves };
  template <class Enter>
  void split(Enter&& enter, token_mask& inside, std::vector<std::int32_t>& edge) const;

 private:
  // Nodes in depth-first preorder, the root (no byte) first, so that node i's subtree is the
  // range [i, end_[i]) and a refused byte skips it in one jump. Node i ends the tokens
  // token_ids_[first_token_[i], first_token_[i + 1]).
  std::vector<unsigned char> byte_;
  std::vector<std::int32_t> depth_, end_, first_token_, token_ids_;
  std::size_t vocab_ = 0;
  int max_depth_ = 0;
};

template <class State, class Step>
void token_trie::allowed(Step&& step, const State& start, token_mask& mask) const {
  if (mask.size() == vocab_) mask.clear();
  else mask = token_mask(vocab_);
  std::vector<std::optional<State>> at_depth(std::size_t(max_depth_) + 1);
  at_depth[0] = start;
  const std::int32_t n = std::int32_t(byte_.size());
  for (std::int32_t i = 1; i < n;) {
    const std::size_t d = std::size_t(depth_[std::size_t(i)]);
    std::optional<State> next = step(*at_depth[d - 1], byte_[std::size_t(i)]);
    if (!next) {
      i = end_[std::size_t(i)];
      continue;
    }
    at_depth[d] = std::move(next);
    for (std::int32_t t = first_token_[std::size_t(i)]; t < first_token_[std::size_t(i) + 1]; ++t)
      mask.set(std::size_t(token_ids_[std::size_t(t)]));
    ++i;
  }
}

template <class Enter>
void token_trie::walk(Enter&& enter, token_mask& mask) const {
  std::vector<std::int32_t> none;  // a walk's nodes are followed or refused: nothing leaves
  split([&](std::int32_t depth, unsigned char b) { return enter(depth, b) ? verdict::follow : verdict::refused; }, mask, none);
}

template <class Enter>
void token_trie::split(Enter&& enter, token_mask& inside, std::vector<std::int32_t>& edge) const {
  if (inside.size() == vocab_) inside.clear();
  else inside = token_mask(vocab_);
  edge.clear();
  const std::int32_t n = std::int32_t(byte_.size());
  for (std::int32_t i = 1; i < n;) {
    const std::size_t at = std::size_t(i);
    const verdict v = enter(depth_[at], byte_[at]);
    if (v != verdict::follow) {
      if (v == verdict::leaves)
        for (std::int32_t t = first_token_[at]; t < first_token_[std::size_t(end_[at])]; ++t) edge.push_back(token_ids_[std::size_t(t)]);
      i = end_[at];
      continue;
    }
    for (std::int32_t t = first_token_[at]; t < first_token_[at + 1]; ++t) inside.set(std::size_t(token_ids_[std::size_t(t)]));
    ++i;
  }
}

}  // namespace troupe::structured
