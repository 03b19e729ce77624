#include "runtime/structured/token_masks.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace troupe::structured {

vocabulary::vocabulary(std::vector<std::string> token_bytes, std::vector<std::int32_t> eos_ids)
    : bytes(std::move(token_bytes)), eos(std::move(eos_ids)), trie(bytes) {}

class masks::walker {
 public:
  explicit walker(const grammar& g) : g_(g) {}

  // The walk's first state: the matcher's stacks interned.
  std::int32_t start(const grammar_matcher& m) {
    std::vector<std::int32_t> tops;
    for (const auto& s : m.stacks()) {
      std::int32_t n = -1;
      for (std::int32_t pos : s) n = node(pos, n);
      tops.push_back(n);
    }
    return state(tops);
  }

  // The state after byte b, or -1 where nothing survives.
  std::int32_t step(std::int32_t from, unsigned char b) {
    const std::uint64_t key = (std::uint64_t(std::uint32_t(from)) << 8) | b;
    if (auto it = steps_.find(key); it != steps_.end()) return it->second;
    scratch_.clear();
    const std::vector<std::int32_t> tops = states_[std::size_t(from)];  // a copy: interning may grow states_
    for (std::int32_t n : tops) {
      if (n < 0) continue;  // a complete parse: nothing follows it
      const std::int32_t pos = nodes_[std::size_t(n)].pos;
      const auto& e = g_.elements()[std::size_t(pos)];
      if (e.k != grammar::kind::bytes || !g_.set(e.arg).test(b)) continue;
      const std::int32_t parent = nodes_[std::size_t(n)].parent;
      const std::int32_t rest = g_.elements()[std::size_t(pos) + 1].k == grammar::kind::end ? parent : node(pos + 1, parent);
      expand(rest, scratch_);
    }
    const std::int32_t to = scratch_.empty() ? -1 : state(scratch_);
    steps_.emplace(key, to);
    return to;
  }

  // Past these, the tables start again (a grammar whose states never repeat must not grow
  // them without bound).
  bool full() const { return nodes_.size() > 2'000'000 || steps_.size() > 4'000'000; }
  bool serves(const grammar& g) const { return &g == &g_; }

 private:
  struct stack_node {
    std::int32_t pos, parent, depth;
  };

  std::int32_t node(std::int32_t pos, std::int32_t parent) {
    const std::uint64_t key = (std::uint64_t(std::uint32_t(pos)) << 32) | std::uint32_t(parent);
    if (auto it = node_ids_.find(key); it != node_ids_.end()) return it->second;
    const std::int32_t id = std::int32_t(nodes_.size());
    nodes_.push_back({pos, parent, parent < 0 ? 1 : nodes_[std::size_t(parent)].depth + 1});
    node_ids_.emplace(key, id);
    return id;
  }

  // As grammar.cpp's expand: references on top replaced by their alternatives until every top
  // is a byte class (or the stack is empty, -1).
  void expand(std::int32_t n, std::vector<std::int32_t>& out) {
    if (n < 0) {
      out.push_back(-1);
      return;
    }
    const std::int32_t pos = nodes_[std::size_t(n)].pos, parent = nodes_[std::size_t(n)].parent;
    const auto& e = g_.elements()[std::size_t(pos)];
    if (e.k == grammar::kind::bytes) {
      out.push_back(n);
      return;
    }
    const std::int32_t rest = g_.elements()[std::size_t(pos) + 1].k == grammar::kind::end ? parent : node(pos + 1, parent);
    if (rest >= 0 && nodes_[std::size_t(rest)].depth >= g_.budget().max_stack_depth) return;  // past the budget: not followed
    for (std::int32_t a : g_.alternatives(e.arg)) {
      if (g_.elements()[std::size_t(a)].k == grammar::kind::end) expand(rest, out);
      else expand(node(a, rest), out);
    }
  }

  std::int32_t state(std::vector<std::int32_t> tops) {
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    if (tops.size() > std::size_t(g_.budget().max_stacks)) tops.resize(std::size_t(g_.budget().max_stacks));
    std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(std::int32_t));
    if (auto it = state_ids_.find(key); it != state_ids_.end()) return it->second;
    const std::int32_t id = std::int32_t(states_.size());
    states_.push_back(std::move(tops));
    state_ids_.emplace(std::move(key), id);
    return id;
  }

  const grammar& g_;
  std::vector<stack_node> nodes_;
  std::unordered_map<std::uint64_t, std::int32_t> node_ids_;
  std::vector<std::vector<std::int32_t>> states_;
  std::unordered_map<std::string, std::int32_t> state_ids_;
  std::unordered_map<std::uint64_t, std::int32_t> steps_;
  std::vector<std::int32_t> scratch_;
};

masks::masks(std::shared_ptr<const vocabulary> vocab, std::size_t max_bytes) : vocab_(std::move(vocab)) {
  const std::size_t per = std::max<std::size_t>(64, (vocab_->size() + 63) / 64 * 8 + 96);
  capacity_ = std::max<std::size_t>(16, max_bytes / per);
}

masks::~masks() = default;

token_mask masks::compute(const grammar_matcher& m) const {
  token_mask mask(vocab_->size());
  {
    std::lock_guard lock(walk_mu_);
    auto& w = walker_;
    if (!w || w->full() || !w->serves(m.rules())) w = std::make_unique<walker>(m.rules());
    std::vector<std::int32_t> at(std::size_t(vocab_->trie.max_token_bytes()) + 1, -1);
    at[0] = w->start(m);
    vocab_->trie.walk(
        [&](std::int32_t depth, unsigned char b) {
          const std::int32_t s = w->step(at[std::size_t(depth) - 1], b);
          at[std::size_t(depth)] = s;
          return s >= 0;
        },
        mask);
  }
  if (m.complete())
    for (std::int32_t e : vocab_->eos)
      if (e >= 0 && std::size_t(e) < mask.size()) mask.set(std::size_t(e));
  return mask;
}

std::shared_ptr<const token_mask> masks::of(const grammar_matcher& m) {
  std::string key = m.key();
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    ++stats_.misses;
  }
  auto mask = std::make_shared<const token_mask>(compute(m));  // outside the lock: other sequences go on
  std::lock_guard lock(mu_);
  if (index_.count(key)) return mask;  // computed twice at once: either copy is right
  lru_.emplace_front(key, mask);
  index_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return mask;
}

masks::counters masks::stats() const {
  std::lock_guard lock(mu_);
  counters c = stats_;
  c.entries = lru_.size();
  return c;
}

}  // namespace troupe::structured
