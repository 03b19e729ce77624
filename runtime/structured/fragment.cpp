#include "runtime/structured/fragment.h"

#include <algorithm>
#include <bitset>
#include <random>

namespace troupe::structured {

namespace {

using kind = grammar::kind;

std::int32_t alternative_end(const grammar& g, std::int32_t pos) {
  while (g.elements()[std::size_t(pos)].k != kind::end) ++pos;
  return pos;
}

// The spelling's digest, fed a word at a time: each word a mark (what it is) and a value, so
// the sequence of words is the spelling. Two lanes with their own multipliers, each word mixed
// down after it is multiplied in, and both finished with a full avalanche.
class digest {
 public:
  digest() : a_(seeds().first), b_(seeds().second) {}
  void add(char mark, std::uint32_t v) {
    const std::uint64_t w = (std::uint64_t(v) << 8) | std::uint8_t(mark);
    a_ = (a_ ^ w) * 0x9e3779b97f4a7c15ULL;
    a_ ^= a_ >> 32;
    b_ = (b_ ^ (w + 0x632be59bd9b4e019ULL)) * 0xc2b2ae3d27d4eb4fULL;
    b_ ^= b_ >> 29;
    ++n_;
  }
  fragment_key finish() const {
    const std::uint64_t a = mix(a_ ^ n_), b = mix(b_ ^ (n_ << 1));
    return {a, b ^ (a >> 1)};
  }

 private:
  static std::uint64_t mix(std::uint64_t x) {  // MurmurHash3's finalizer
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
  }
  static std::pair<std::uint64_t, std::uint64_t> seeds() {
    static const std::pair<std::uint64_t, std::uint64_t> s = [] {
      std::random_device rd;
      const auto word = [&] { return (std::uint64_t(rd()) << 32) | rd(); };
      return std::pair{word(), word()};
    }();
    return s;
  }
  std::uint64_t a_, b_, n_ = 0;
};

// A table entry of this call (fragment_scratch): its value, or `none` where unset.
std::int32_t get(const fragment_scratch::table& t, std::uint32_t call, std::int32_t i, std::int32_t none) {
  return std::size_t(i) < t.value.size() && t.stamp[std::size_t(i)] == call ? t.value[std::size_t(i)] : none;
}
void put(fragment_scratch::table& t, std::uint32_t call, std::int32_t i, std::int32_t v) {
  t.fit(std::size_t(i) + 1);
  t.value[std::size_t(i)] = v;
  t.stamp[std::size_t(i)] = call;
}

// The rules a fragment reaches within the horizon: each with the fewest bytes matched before
// it is entered. A rule entered only past the horizon cannot change a mask (no token is that
// long), so it is named but not spelled: a string of at most 200 characters and one of at most
// 100 then share their fragments, where the characters left exceed any token.
class reach_map {
 public:
  reach_map(const grammar& g, int horizon, fragment_scratch& s) : g_(&g), horizon_(horizon), s_(s) {
    s_.work.clear();
    s_.undo.clear();
  }

  // Follows elements [from, to) entered after `d` bytes; the bytes after them, at least.
  int follow(std::int32_t from, std::int32_t to, int d) {
    size_ += to - from;
    d = follow_run(from, to, d);
    while (!s_.work.empty()) {
      const std::int32_t r = s_.work.back();
      s_.work.pop_back();
      const int at = distance(r);
      for (std::int32_t a : g_->alternatives(r)) follow_run(a, alternative_end(*g_, a), at);
    }
    return d;
  }
  // The fewest bytes before rule r is entered, or above the horizon.
  int distance(std::int32_t r) const { return get(s_.distance, s_.call, r, horizon_ + 1); }
  int size() const { return size_; }  // elements of the frames and the rules within reach

  // A trial: follow, then keep it or go back to where mark() was called.
  void mark() {
    s_.undo.clear();
    marked_size_ = size_;
  }
  void back() {
    for (auto it = s_.undo.rbegin(); it != s_.undo.rend(); ++it) {
      if (it->second < 0) s_.distance.stamp[std::size_t(it->first)] = 0;  // not reached
      else s_.distance.value[std::size_t(it->first)] = it->second;
    }
    s_.undo.clear();
    size_ = marked_size_;
  }

 private:
  int follow_run(std::int32_t from, std::int32_t to, int d) {
    for (std::int32_t p = from; p < to && d <= horizon_; ++p) {
      const auto& e = g_->elements()[std::size_t(p)];
      if (e.k == kind::bytes) {
        ++d;
        continue;
      }
      enter(e.arg, d);
      d += g_->min_bytes(e.arg);
    }
    return std::min(d, horizon_ + 1);
  }
  void enter(std::int32_t r, int d) {
    const std::int32_t known = get(s_.distance, s_.call, r, -1);
    if (known >= 0) {
      if (d < known) {
        s_.undo.emplace_back(r, known);
        s_.distance.value[std::size_t(r)] = d;
        s_.work.push_back(r);
      }
      return;
    }
    put(s_.distance, s_.call, r, d);
    s_.undo.emplace_back(r, -1);
    s_.work.push_back(r);
    for (std::int32_t a : g_->alternatives(r)) size_ += alternative_end(*g_, a) - a + 1;
  }

  const grammar* g_;
  int horizon_;
  fragment_scratch& s_;
  int size_ = 0, marked_size_ = 0;
};

// Spells a fragment with rules and byte classes numbered in order of first appearance, so that
// the spelling names a language and not a grammar's numbering.
class speller {
 public:
  speller(const grammar& g, const reach_map& reach, int horizon, fragment_scratch& s, digest& key)
      : g_(g), reach_(reach), horizon_(horizon), s_(s), key_(key) {
    s_.order.clear();
    s_.classes.clear();
  }

  void frame(std::int32_t from, std::int32_t to) {
    key_.add('F', 0);
    spell(from, to);
  }

  void finish() {
    for (std::size_t i = 0; i < s_.order.size(); ++i) {  // grows while it is read: rules reach rules
      const std::int32_t r = s_.order[i];
      if (reach_.distance(r) > horizon_) {
        key_.add('X', 0);  // past the horizon: named, not spelled
        continue;
      }
      key_.add('R', 0);
      for (std::int32_t a : g_.alternatives(r)) {
        key_.add('A', 0);
        spell(a, alternative_end(g_, a));
      }
    }
    static const std::bitset<256> low32(~std::uint32_t(0));
    for (std::int32_t c : s_.classes) {
      key_.add('C', 0);
      const auto& set = g_.set(c);
      for (std::size_t w = 0; w < 8; ++w) key_.add('c', ((set >> (w * 32)) & low32).to_ulong());
    }
  }

 private:
  void spell(std::int32_t from, std::int32_t to) {
    for (std::int32_t p = from; p < to; ++p) {
      const auto& e = g_.elements()[std::size_t(p)];
      const bool is_class = e.k == kind::bytes;
      auto& seen = is_class ? s_.classes : s_.order;
      auto& ids = is_class ? s_.class_number : s_.rule_number;
      std::int32_t id = get(ids, s_.call, e.arg, -1);
      if (id < 0) {
        id = std::int32_t(seen.size());
        put(ids, s_.call, e.arg, id);
        seen.push_back(e.arg);
      }
      key_.add(is_class ? 'b' : 'r', std::uint32_t(id));
    }
    key_.add('.', 0);
  }

  const grammar& g_;
  const reach_map& reach_;
  int horizon_;
  fragment_scratch& s_;
  digest& key_;
};

}  // namespace

// Which frames: as few as keep the tokens that leave the fragment few, and no more, since every
// frame spelled is one more place where two grammars may differ. The top frame's run of byte
// classes is kept (a literal's rest; after the reference, where the top is a rule entered), and
// past it a tail reference (a repetition goes on); a
// frame that is wholly kept lets the one below in. Below the top, a frame that goes on with a
// byte class (a string's closing quote) ends the fragment after that run; one that goes on with
// a tail reference is kept whole; one that goes on with any other reference ends the fragment
// after it.
fragment choose_fragment(const grammar& g, const std::vector<std::int32_t>& stack, const fragment_limits& limits,
                         fragment_scratch* scratch) {
  fragment_scratch own;
  fragment_scratch& sc = scratch ? *scratch : own;
  if (++sc.call == 0) {  // the stamps wrapped: every entry is old
    for (auto* t : {&sc.distance, &sc.rule_number, &sc.class_number}) std::fill(t->stamp.begin(), t->stamp.end(), 0);
    sc.call = 1;
  }
  fragment f;
  reach_map reach(g, limits.horizon, sc);
  const auto& el = g.elements();
  auto is_bytes = [&](std::int32_t p) { return el[std::size_t(p)].k == kind::bytes; };
  auto is_tail_ref = [&](std::int32_t p) { return el[std::size_t(p)].k == kind::rule && el[std::size_t(p) + 1].k == kind::end; };
  int d = 0;  // bytes matched, at least, before the frame is entered
  const int max_frames = std::min(limits.max_frames, most_frames);
  for (std::size_t i = stack.size(); i-- > 0 && int(f.frames.size()) < max_frames;) {
    const std::int32_t pos = stack[i], end = alternative_end(g, pos);
    const bool top = i + 1 == stack.size();
    std::int32_t to = pos;
    bool more = false;  // the frame is kept whole: the one below may join
    if (top || is_bytes(pos)) {
      if (top && !is_bytes(pos)) ++to;  // a rule entered: the reference, then what follows it
      while (to < end && is_bytes(to)) ++to;
      if (to < end && top && is_tail_ref(to)) ++to;
      more = top && to == end;
    } else {
      ++to;  // the reference it goes on with
      more = to == end;
    }
    reach.mark();
    int after = reach.follow(pos, to, d);
    if (reach.size() > limits.max_elements) {  // too much to spell: as much of the byte run as fits
      reach.back();
      to = pos;
      while (to < end && is_bytes(to) && reach.size() + (to - pos) + 1 <= limits.max_elements) ++to;
      if (to == pos) break;
      after = reach.follow(pos, to, d);
      more = false;
    }
    f.frames.push_back({pos, to == end ? -1 : to});
    d = after;
    if (!more) break;
  }
  digest key;
  key.add('s', std::uint32_t(g.budget().max_stacks));
  key.add('d', std::uint32_t(g.budget().max_stack_depth));
  key.add('h', std::uint32_t(limits.horizon));
  speller sp(g, reach, limits.horizon, sc, key);
  for (const auto& fr : f.frames) sp.frame(fr.pos, fr.limit < 0 ? alternative_end(g, fr.pos) : fr.limit);
  sp.finish();
  f.key = key.finish();
  return f;
}

std::size_t fragment_cache::cost(const fragment_mask& m) {
  return sizeof(fragment_key) + m.inside.words().size() * sizeof(std::uint64_t) + m.edge.size() * sizeof(std::int32_t) + 160;
}

std::shared_ptr<const fragment_mask> fragment_cache::find(const fragment_key& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void fragment_cache::put(const fragment_key& key, std::shared_ptr<const fragment_mask> m) {
  std::lock_guard lock(mu_);
  if (index_.count(key)) return;  // computed twice at once: either is right
  stats_.bytes += cost(*m);
  lru_.emplace_front(key, std::move(m));
  index_.emplace(key, lru_.begin());
  while (stats_.bytes > max_bytes_ && lru_.size() > 1) {
    stats_.bytes -= cost(*lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

fragment_cache::counters fragment_cache::stats() const {
  std::lock_guard lock(mu_);
  counters c = stats_;
  c.entries = lru_.size();
  return c;
}

}  // namespace troupe::structured
