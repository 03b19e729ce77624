#include "runtime/structured/token_masks.h"

#include <algorithm>
#include <bitset>
#include <optional>
#include <unordered_map>

#include "runtime/structured/fragment.h"

namespace troupe::structured {

vocabulary::vocabulary(std::vector<std::string> token_bytes, std::vector<std::int32_t> eos_ids)
    : bytes(std::move(token_bytes)), eos(std::move(eos_ids)), trie(bytes) {}

// Named, not anonymous: masks::walker (a class with linkage) holds these tables.
namespace mask_walk {

// A map from 64-bit keys to ids with open addressing: the walk's tables take millions of
// entries, and a node-based map spent more time in malloc and free (and pointer chasing) than
// in the walk. No key is all ones (positions and states are below 2^31).
class flat_index {
 public:
  static constexpr std::uint64_t empty = ~std::uint64_t(0);
  std::int32_t find(std::uint64_t key) const {
    if (keys_.empty()) return -2;
    for (std::size_t i = slot(key);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == key) return values_[i];
      if (keys_[i] == empty) return -2;
    }
  }
  void put(std::uint64_t key, std::int32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    std::size_t i = slot(key);
    while (keys_[i] != empty && keys_[i] != key) i = (i + 1) & (keys_.size() - 1);
    if (keys_[i] == empty) ++size_;
    keys_[i] = key;
    values_[i] = value;
  }
  std::size_t size() const { return size_; }

 private:
  std::size_t slot(std::uint64_t key) const {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return std::size_t(key) & (keys_.size() - 1);
  }
  void grow() {
    std::vector<std::uint64_t> keys(std::max<std::size_t>(64, keys_.size() * 2), empty);
    std::vector<std::int32_t> values(keys.size());
    keys.swap(keys_);
    values.swap(values_);
    size_ = 0;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != empty) put(keys[i], values[i]);
  }
  std::vector<std::uint64_t> keys_;
  std::vector<std::int32_t> values_;
  std::size_t size_ = 0;
};

}  // namespace mask_walk

namespace {

using mask_walk::flat_index;

std::uint64_t hash_tops(const std::int32_t* tops, std::size_t n) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ std::uint32_t(tops[i])) * 0x100000001b3ULL + (h >> 29);
  return h >> 1;  // never all ones
}

}  // namespace

class masks::walker {
 public:
  explicit walker(const grammar& g) : g_(g) {}

  // The walk's first state: the matcher's stacks interned.
  std::int32_t start(const grammar_matcher& m) {
    std::vector<std::int32_t> tops;
    for (const auto& s : m.stacks()) {
      std::int32_t n = -1;
      for (std::int32_t pos : s) n = node(pos, n, -1);
      tops.push_back(n);
    }
    deepest_ = 0;
    return state(tops, false);
  }

  // A fragment's first state: its frames as one stack, the bottom one ending at its limit, and
  // a reference on top (a rule entered) expanded into the rule's alternatives.
  std::int32_t start(const fragment& f) {
    std::int32_t n = -1;
    for (auto it = f.frames.rbegin(); it != f.frames.rend(); ++it) n = node(it->pos, n, n < 0 ? it->limit : -1);
    scratch_.clear();
    cut_ = false;
    deepest_ = 0;
    expand(n, scratch_);
    return state(scratch_, cut_);
  }

  // The state after byte b, or -1 where nothing survives.
  std::int32_t step(std::int32_t from, unsigned char b) {
    // Most bytes a state meets in a walk are refused (a literal takes one of the root's
    // hundreds): those are answered by the state's byte set, and the step table holds the rest.
    if (!states_[std::size_t(from)].bytes.test(b)) return -1;
    const std::uint64_t key = (std::uint64_t(std::uint32_t(from)) << 8) | b;
    if (const std::int32_t known = steps_.find(key); known != -2) return known;
    scratch_.clear();
    cut_ = false;
    deepest_ = 0;
    for (std::size_t i = 0; i < states_[std::size_t(from)].tops.size(); ++i) {  // by index: interning may grow states_
      const std::int32_t n = states_[std::size_t(from)].tops[i];
      if (n < 0) continue;  // a complete parse: nothing follows it
      const std::int32_t pos = nodes_[std::size_t(n)].pos;
      const auto& e = g_.elements()[std::size_t(pos)];
      if (e.k != grammar::kind::bytes || !g_.set(e.arg).test(b)) continue;
      expand(after(n), scratch_);
    }
    const std::int32_t to = scratch_.empty() ? -1 : state(scratch_, cut_);
    steps_.put(key, to);
    return to;
  }

  struct state_info {
    std::vector<std::int32_t> tops;  // sorted: -1 (a complete parse) first
    std::int32_t depth = 0;          // the deepest stack built on the way here, in frames
    bool cut = false;                // a budget dropped stacks on the way here
    std::bitset<256> bytes;          // the bytes some top's class takes
  };
  const state_info& info(std::int32_t s) const { return states_[std::size_t(s)]; }
  bool completes(std::int32_t s) const { return !info(s).tops.empty() && info(s).tops.front() < 0; }

  // Past these, the tables start again (a grammar whose states never repeat must not grow
  // them without bound).
  bool full() const { return nodes_.size() > 2'000'000 || steps_.size() > 4'000'000; }
  bool serves(const grammar& g) const { return &g == &g_; }
  const grammar& rules() const { return g_; }

 private:
  struct stack_node {
    std::int32_t pos, parent, depth, limit;
  };

  // Nodes are interned: equal stacks are equal ids. A limit (a fragment's bottom frame) keeps
  // its nodes apart from the grammar's own.
  std::int32_t node(std::int32_t pos, std::int32_t parent, std::int32_t limit) {
    const std::uint64_t key = (std::uint64_t(std::uint32_t(pos)) << 32) | std::uint32_t(limit < 0 ? parent : limit);
    auto& ids = limit < 0 ? node_ids_ : limited_ids_;
    if (const std::int32_t known = ids.find(key); known != -2) return known;
    const std::int32_t id = std::int32_t(nodes_.size());
    nodes_.push_back({pos, parent, parent < 0 ? 1 : nodes_[std::size_t(parent)].depth + 1, limit});
    ids.put(key, id);
    return id;
  }

  // What is left of the frame of node n once its element is matched: its next element, or the
  // frame below where the alternative (or the fragment's bottom frame) ends.
  std::int32_t after(std::int32_t n) {
    const stack_node& s = nodes_[std::size_t(n)];
    const std::int32_t next = s.pos + 1;
    if (next == s.limit || g_.elements()[std::size_t(next)].k == grammar::kind::end) return s.parent;
    return node(next, s.parent, s.limit);
  }

  // As grammar.cpp's expand: references on top replaced by their alternatives until every top
  // is a byte class (or the stack is empty, -1).
  void expand(std::int32_t n, std::vector<std::int32_t>& out) {
    if (n < 0) {
      out.push_back(-1);
      return;
    }
    const auto& e = g_.elements()[std::size_t(nodes_[std::size_t(n)].pos)];
    if (e.k == grammar::kind::bytes) {
      out.push_back(n);
      return;
    }
    const std::int32_t rest = after(n);
    if (rest >= 0) deepest_ = std::max(deepest_, nodes_[std::size_t(rest)].depth);
    if (rest >= 0 && nodes_[std::size_t(rest)].depth >= g_.budget().max_stack_depth) {  // past the budget: not followed
      cut_ = true;
      return;
    }
    for (std::int32_t a : g_.alternatives(e.arg)) {
      if (g_.elements()[std::size_t(a)].k == grammar::kind::end) expand(rest, out);
      else expand(node(a, rest, -1), out);
    }
  }

  // States are interned by their sorted tops; equal hashes chain through same_hash_.
  std::int32_t state(std::vector<std::int32_t>& tops, bool cut) {
    std::sort(tops.begin(), tops.end());
    tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
    if (tops.size() > std::size_t(g_.budget().max_stacks)) {
      tops.resize(std::size_t(g_.budget().max_stacks));
      cut = true;
    }
    const std::uint64_t h = hash_tops(tops.data(), tops.size());
    const std::int32_t first = state_ids_.find(h);
    for (std::int32_t id = first; id >= 0; id = same_hash_[std::size_t(id)])
      if (states_[std::size_t(id)].tops == tops) {
        states_[std::size_t(id)].cut |= cut;
        states_[std::size_t(id)].depth = std::max(states_[std::size_t(id)].depth, deepest_);
        return id;
      }
    const std::int32_t id = std::int32_t(states_.size());
    std::int32_t depth = deepest_;
    std::bitset<256> bytes;
    for (std::int32_t n : tops) {
      if (n < 0) continue;
      depth = std::max(depth, nodes_[std::size_t(n)].depth);
      const auto& e = g_.elements()[std::size_t(nodes_[std::size_t(n)].pos)];
      if (e.k == grammar::kind::bytes) bytes |= g_.set(e.arg);
    }
    states_.push_back({tops, depth, cut, bytes});
    same_hash_.push_back(first >= 0 ? first : -1);
    state_ids_.put(h, id);
    return id;
  }

  const grammar& g_;
  std::vector<stack_node> nodes_;
  flat_index node_ids_, limited_ids_;
  std::vector<state_info> states_;
  flat_index state_ids_;                // a hash of the tops: the newest state with it
  std::vector<std::int32_t> same_hash_;  // the state before it with the same hash, or -1
  flat_index steps_;
  std::vector<std::int32_t> scratch_;
  bool cut_ = false;        // of the step being computed
  std::int32_t deepest_ = 0;  // of the step being computed
};

masks::masks(std::shared_ptr<const vocabulary> vocab, std::size_t max_bytes, std::shared_ptr<fragment_cache> fragments)
    : vocab_(std::move(vocab)), fragments_(fragments ? std::move(fragments) : std::make_shared<fragment_cache>()) {
  const std::size_t per = std::max<std::size_t>(64, (vocab_->size() + 63) / 64 * 8 + 96);
  capacity_ = std::max<std::size_t>(16, max_bytes / per);
}

masks::~masks() = default;

masks::walker& masks::walker_for(const grammar& g) const {
  if (!walker_ || walker_->full() || !walker_->serves(g)) walker_ = std::make_unique<walker>(g);
  return *walker_;
}

namespace {

void allow_eos(const vocabulary& v, const grammar_matcher& m, token_mask& mask) {
  if (!m.complete()) return;
  for (std::int32_t e : v.eos)
    if (e >= 0 && std::size_t(e) < mask.size()) mask.set(std::size_t(e));
}

}  // namespace

token_mask masks::compute(const grammar_matcher& m) const {
  token_mask mask(vocab_->size());
  {
    std::lock_guard lock(walk_mu_);
    walker& w = walker_for(m.rules());
    std::vector<std::int32_t> at(std::size_t(vocab_->trie.max_token_bytes()) + 1, -1);
    at[0] = w.start(m);
    vocab_->trie.walk(
        [&](std::int32_t depth, unsigned char b) {
          const std::int32_t s = w.step(at[std::size_t(depth) - 1], b);
          at[std::size_t(depth)] = s;
          return s >= 0;
        },
        mask);
  }
  allow_eos(*vocab_, m, mask);
  return mask;
}

token_mask masks::assemble(const grammar_matcher& m) const {
  token_mask mask(vocab_->size());
  bool assembled;
  {
    std::lock_guard lock(walk_mu_);
    assembled = assemble(walker_for(m.rules()), m, mask);
  }
  if (!assembled) return compute(m);
  allow_eos(*vocab_, m, mask);
  return mask;
}

// A fragment's walk: a token is inside where the fragment consumes all its bytes, refused where
// every path dies before the fragment's end, and on the edge where a path reached the end with
// bytes left (what follows decides).
std::shared_ptr<const fragment_mask> masks::walk_fragment(walker& w, const fragment& f) const {
  auto out = std::make_shared<fragment_mask>();
  const auto& trie = vocab_->trie;
  std::vector<std::int32_t> at(std::size_t(trie.max_token_bytes()) + 1, -1);
  std::vector<char> left(at.size(), 0);  // a path reached the fragment's end before this depth
  at[0] = w.start(f);
  bool cut = w.info(at[0]).cut;
  int depth = w.info(at[0]).depth, stacks = int(w.info(at[0]).tops.size());
  using verdict = token_trie::verdict;
  trie.split(
      [&](std::int32_t d, unsigned char b) {
        const std::size_t i = std::size_t(d);
        const bool gone = left[i - 1] || w.completes(at[i - 1]);
        const std::int32_t s = w.step(at[i - 1], b);
        if (s < 0) return gone ? verdict::leaves : verdict::refused;
        at[i] = s;
        left[i] = gone;
        const auto& inf = w.info(s);
        cut |= inf.cut;
        depth = std::max(depth, int(inf.depth));
        stacks = std::max(stacks, int(inf.tops.size()));
        return verdict::follow;
      },
      out->inside, out->edge);
  out->depth = depth;
  out->stacks = stacks;
  // Past this many edge tokens, stepping each through the whole state costs more than walking
  // the state's trie, which shares their prefixes.
  const std::size_t most_edge = std::max<std::size_t>(64, vocab_->size() / 32);
  out->usable = !cut && out->edge.size() <= most_edge;
  return out;
}

const masks::top_fragment& masks::fragment_of(walker& w, const grammar_matcher::stack& s) const {
  fragment_limits limits;
  limits.horizon = vocab_->trie.max_token_bytes();
  const std::size_t top = std::min(s.size(), std::size_t(limits.max_frames));
  top_key key;
  key.size = std::uint8_t(top);
  std::copy(s.end() - std::ptrdiff_t(top), s.end(), key.positions.begin());
  if (auto it = tops_.find(key); it != tops_.end()) return it->second;
  const fragment f = choose_fragment(w.rules(), s, limits, &scratch_);
  auto fm = fragments_->find(f.key);
  if (!fm) {
    fm = walk_fragment(w, f);
    fragments_->put(f.key, fm);
  }
  if (tops_.size() >= 100'000) tops_.clear();  // bounded: a grammar with endless tops starts again
  return tops_.emplace(key, top_fragment{f.frames.size(), std::move(fm)}).first->second;
}

namespace {

// Whether pos begins an alternative of rule, or of a rule that an alternative of it consisting
// of one reference enters on the same stack (char ::= unescaped | escaped), a few steps deep.
bool alternative_of(const grammar& g, std::int32_t rule, std::int32_t pos, int depth = 0) {
  for (std::int32_t a : g.alternatives(rule)) {
    if (a == pos) return true;
    const auto& e = g.elements()[std::size_t(a)];
    if (depth < 3 && e.k == grammar::kind::rule && g.elements()[std::size_t(a) + 1].k == grammar::kind::end &&
        alternative_of(g, e.arg, pos, depth + 1))
      return true;
  }
  return false;
}

// The stack from before the matcher entered the rule whose alternative is on s's top: the frame
// below stands just past a reference to that rule, and is moved back onto it. Entering a rule
// puts every alternative of it on the same stack below (all or, past a budget, none), so where
// the state was not cut the one stack stands for all of them: a string's character is a dozen
// alternatives (a UTF-8 lead byte each), and a dozen fragments walked and spelled per position
// become one.
bool entered_from(const grammar& g, const grammar_matcher::stack& s, grammar_matcher::stack& out) {
  if (s.size() < 2 || s[s.size() - 2] < 1) return false;
  const std::int32_t ref = s[s.size() - 2] - 1;
  const auto& e = g.elements()[std::size_t(ref)];
  if (e.k != grammar::kind::rule || !alternative_of(g, e.arg, s.back())) return false;
  out.assign(s.begin(), s.end() - 1);
  out.back() = ref;
  return true;
}

}  // namespace

bool masks::assemble(walker& w, const grammar_matcher& m, token_mask& mask) const {
  const grammar_budget& budget = m.rules().budget();
  std::vector<top_fragment> parts;  // copies: a later fragment_of may clear tops_
  std::vector<grammar_matcher::stack> entered;  // the stacks before a rule was entered, each once
  // Past max_stacks the matcher kept some stacks and dropped others: a rule's alternatives may
  // then be there in part, and its entry would allow what the matcher refuses.
  const bool whole = m.stacks().size() < std::size_t(budget.max_stacks);
  grammar_matcher::stack before;
  int stacks = 0;
  for (const auto& s : m.stacks()) {
    if (s.empty()) continue;  // a complete parse: EOS, the caller's
    // A reference left on top past the depth budget matches nothing (the whole walk skips it).
    if (m.rules().elements()[std::size_t(s.back())].k != grammar::kind::bytes) continue;
    const grammar_matcher::stack* use = &s;
    if (whole && entered_from(m.rules(), s, before)) {
      if (std::find(entered.begin(), entered.end(), before) != entered.end()) continue;  // its rule's fragment is in
      entered.push_back(before);
      use = &entered.back();
    }
    const top_fragment& t = fragment_of(w, *use);
    // The fragment's walk held its stacks as deep as `depth` frames; under the rest of this
    // stack they are that much deeper, and the budget must not cut them there either.
    if (!t.mask->usable || int(use->size() - t.frames) + t.mask->depth + 2 >= budget.max_stack_depth) {
      ++walked_;
      return false;
    }
    stacks += t.mask->stacks;
    parts.push_back(t);
  }
  if (stacks * 2 > budget.max_stacks) {  // stacks the budget could drop in a whole walk
    ++walked_;
    return false;
  }
  for (const top_fragment& t : parts) mask |= t.mask->inside;
  const std::int32_t start = w.start(m);
  for (const top_fragment& t : parts)
    for (std::int32_t id : t.mask->edge) {
      if (mask.test(std::size_t(id))) continue;
      std::int32_t at = start;
      for (char c : vocab_->bytes[std::size_t(id)])
        if ((at = w.step(at, static_cast<unsigned char>(c))) < 0) break;
      if (at >= 0) mask.set(std::size_t(id));
    }
  ++assembled_;
  return true;
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
  auto mask = std::make_shared<const token_mask>(assemble(m));  // outside mu_: other sequences go on
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
  c.assembled = assembled_;
  c.walked = walked_;
  return c;
}

}  // namespace troupe::structured
