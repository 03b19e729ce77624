#include "runtime/structured/grammar.h"

#include <algorithm>
#include <functional>

#include "runtime/common/error.h"

namespace troupe::structured {

namespace {

using element = grammar::element;
using kind = grammar::kind;
using stack = grammar_matcher::stack;

// Pushes `s` (whose top may still be a reference) onto `out` with every reference on top
// expanded into its alternatives, so each stack in `out` is empty or has a byte class on top.
// Terminates because build() refused rules that reach themselves without consuming a byte.
void expand(const grammar& g, stack& s, std::vector<stack>& out) {
  if (s.empty()) {
    out.push_back(s);
    return;
  }
  const std::int32_t top = s.back();
  const element& e = g.elements()[std::size_t(top)];
  if (e.k == kind::bytes) {
    out.push_back(s);
    return;
  }
  // A reference: its frame continues after it (unless it was last: a tail call), then one
  // stack per alternative of the rule.
  s.pop_back();
  if (g.elements()[std::size_t(top) + 1].k != kind::end) s.push_back(top + 1);
  if (int(s.size()) >= g.budget().max_stack_depth) {  // deeper than the budget: not followed
    if (g.elements()[std::size_t(top) + 1].k != kind::end) s.pop_back();
    s.push_back(top);
    return;
  }
  const std::size_t base = s.size();
  for (std::int32_t a : g.alternatives(e.arg)) {
    if (g.elements()[std::size_t(a)].k != kind::end) s.push_back(a);
    expand(g, s, out);
    s.resize(base);
  }
  if (g.elements()[std::size_t(top) + 1].k != kind::end) s.pop_back();
  s.push_back(top);
}

void normalise(const grammar& g, std::vector<stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  // Ambiguity past the budget: the first stacks are kept (the grammar narrows, every output it
  // lets through is still a sentence of it).
  if (stacks.size() > std::size_t(g.budget().max_stacks)) stacks.resize(std::size_t(g.budget().max_stacks));
}

std::string set_key(const std::bitset<256>& s) { return s.to_string(); }

}  // namespace

// ---- builder ----

grammar_builder::grammar_builder(grammar_budget budget) { g_.budget_ = budget; }

void grammar_builder::count(std::size_t elements) {
  element_count_ += elements;
  if (element_count_ > std::size_t(g_.budget_.max_elements))
    throw input_error("the grammar is too large: more than " + std::to_string(g_.budget_.max_elements) +
                      " elements (a bound such as maxLength, {n,m} or maxItems that is too big?)");
}

std::int32_t grammar_builder::rule(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  if (g_.alts_.size() >= std::size_t(g_.budget_.max_rules))
    throw input_error("the grammar is too large: more than " + std::to_string(g_.budget_.max_rules) + " rules");
  const std::int32_t id = std::int32_t(g_.alts_.size());
  g_.alts_.emplace_back();
  g_.names_.push_back(name);
  by_name_.emplace(name, id);
  return id;
}

std::int32_t grammar_builder::fresh(const std::string& hint) {
  std::string name;
  do name = hint + "-" + std::to_string(++fresh_);
  while (by_name_.count(name));
  return rule(name);
}

bool grammar_builder::has_alternatives(std::int32_t r) const { return !g_.alts_[std::size_t(r)].empty(); }

void grammar_builder::add(std::int32_t r, std::vector<element> alternative) {
  count(alternative.size() + 1);
  g_.alts_[std::size_t(r)].push_back(std::int32_t(g_.elements_.size()));
  for (const element& e : alternative) g_.elements_.push_back(e);
  g_.elements_.push_back({kind::end, 0});
}

element grammar_builder::bytes(const std::bitset<256>& set) {
  const std::string k = set_key(set);
  auto it = set_ids_.find(k);
  if (it != set_ids_.end()) return {kind::bytes, it->second};
  const std::int32_t id = std::int32_t(g_.sets_.size());
  g_.sets_.push_back(set);
  set_ids_.emplace(k, id);
  return {kind::bytes, id};
}

element grammar_builder::byte(unsigned char b) {
  std::bitset<256> s;
  s.set(b);
  return bytes(s);
}

void grammar_builder::literal(std::vector<element>& seq, std::string_view text) {
  for (char c : text) seq.push_back(byte(static_cast<unsigned char>(c)));
}

std::int32_t grammar_builder::repeat(const std::vector<element>& x, int min, int max, const std::string& hint) {
  if (max >= 0 && max < min) throw input_error(hint + ": a repetition's maximum " + std::to_string(max) +
                                               " is below its minimum " + std::to_string(min));
  count(x.size() * std::size_t(std::max(min, max < 0 ? min + 1 : max)));
  // The optional tail first: x* is star ::= x star | ; x{0,k} nests k optional copies.
  std::int32_t tail = -1;
  if (max < 0) {
    tail = fresh(hint + "-star");
    std::vector<element> more = x;
    more.push_back(ref(tail));
    add(tail, more);
    add(tail, {});
  } else {
    for (int i = 0; i < max - min; ++i) {
      const std::int32_t t = fresh(hint + "-opt");
      std::vector<element> more = x;
      if (tail >= 0) more.push_back(ref(tail));
      add(t, more);
      add(t, {});
      tail = t;
    }
  }
  const std::int32_t r = fresh(hint + "-rep");
  std::vector<element> seq;
  for (int i = 0; i < min; ++i) seq.insert(seq.end(), x.begin(), x.end());
  if (tail >= 0) seq.push_back(ref(tail));
  add(r, seq);
  return r;
}

std::int32_t grammar_builder::add_dfa(const byte_dfa& dfa, const std::string& hint, bool escape_json) {
  const int n = dfa.states();
  // States from which an accepting state can be reached: transitions into the others are dropped
  // (a rule without alternatives would be a grammar error).
  std::vector<bool> live(std::size_t(n), false);
  for (int s = 0; s < n; ++s) live[std::size_t(s)] = dfa.accepting[std::size_t(s)];
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < n; ++s) {
      if (live[std::size_t(s)]) continue;
      for (int b = 0; b < 256 && !live[std::size_t(s)]; ++b) {
        const auto t = dfa.step(s, static_cast<unsigned char>(b));
        if (t && live[std::size_t(*t)]) live[std::size_t(s)] = changed = true;
      }
    }
  }
  if (!live[std::size_t(dfa.start)]) throw input_error(hint + ": the pattern matches nothing");
  std::vector<std::int32_t> rules(std::size_t(n), -1);
  for (int s = 0; s < n; ++s)
    if (live[std::size_t(s)]) rules[std::size_t(s)] = fresh(hint + "-s");
  for (int s = 0; s < n; ++s) {
    if (!live[std::size_t(s)]) continue;
    std::vector<std::bitset<256>> to(static_cast<std::size_t>(n));
    std::vector<std::pair<unsigned char, int>> escaped;
    for (int b = 0; b < 256; ++b) {
      const auto t = dfa.step(s, static_cast<unsigned char>(b));
      if (!t || !live[std::size_t(*t)]) continue;
      if (escape_json && (b == '"' || b == '\\' || b < 0x20)) escaped.emplace_back(static_cast<unsigned char>(b), *t);
      else to[std::size_t(*t)].set(std::size_t(b));
    }
    for (int t = 0; t < n; ++t)
      if (to[std::size_t(t)].any()) add(rules[std::size_t(s)], {bytes(to[std::size_t(t)]), ref(rules[std::size_t(t)])});
    for (auto [b, t] : escaped) {
      static const char* hex = "0123456789abcdef";
      std::string spelled = b == '"' ? "\\\"" : b == '\\' ? "\\\\" : b == '\n' ? "\\n" : b == '\t' ? "\\t" : b == '\r' ? "\\r"
                            : std::string("\\u00") + hex[b >> 4] + hex[b & 15];
      std::vector<element> seq;
      literal(seq, spelled);
      seq.push_back(ref(rules[std::size_t(t)]));
      add(rules[std::size_t(s)], seq);
    }
    if (dfa.accepting[std::size_t(s)]) add(rules[std::size_t(s)], {});
  }
  return rules[std::size_t(dfa.start)];
}

namespace {

// The UTF-8 encodings of the code points [lo, hi] (one length, no surrogates) as sequences of
// byte ranges: split until every continuation position spans its whole 0x80-0xBF range or the
// two ends share the prefix (the decomposition RE2 and Rust's regex use).
void utf8_sequences(std::uint32_t lo, std::uint32_t hi, std::vector<std::vector<std::pair<int, int>>>& out) {
  static const std::uint32_t limits[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 0; n < 3; ++n)
    if (lo <= limits[n] && hi > limits[n]) {
      utf8_sequences(lo, limits[n], out);
      utf8_sequences(limits[n] + 1, hi, out);
      return;
    }
  const int len = hi <= 0x7F ? 1 : hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < len; ++i) {
    const std::uint32_t m = (std::uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [len](std::uint32_t c) {
    std::vector<int> b(static_cast<std::size_t>(len));
    if (len == 1) b[0] = int(c);
    else {
      for (int i = len - 1; i > 0; --i, c >>= 6) b[std::size_t(i)] = 0x80 | int(c & 0x3F);
      b[0] = (len == 2 ? 0xC0 : len == 3 ? 0xE0 : 0xF0) | int(c);
    }
    return b;
  };
  const auto a = encode(lo), z = encode(hi);
  std::vector<std::pair<int, int>> seq;
  for (int i = 0; i < len; ++i) seq.emplace_back(a[std::size_t(i)], z[std::size_t(i)]);
  out.push_back(std::move(seq));
}

}  // namespace

std::int32_t grammar_builder::char_class(std::vector<code_range> ranges, bool negated, const std::string& hint) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<code_range> merged;
  for (auto [a, b] : ranges) {
    if (a > b || a > 0x10FFFF) throw input_error(hint + ": a character range runs backwards or past U+10FFFF");
    b = std::min<std::uint32_t>(b, 0x10FFFF);
    if (!merged.empty() && a <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, b);
    else merged.emplace_back(a, b);
  }
  if (negated) {
    std::vector<code_range> inv;
    std::uint32_t next = 0;
    for (auto [a, b] : merged) {
      if (a > next) inv.emplace_back(next, a - 1);
      next = b + 1;
    }
    if (next <= 0x10FFFF) inv.emplace_back(next, 0x10FFFF);
    merged = std::move(inv);
  }
  std::vector<code_range> scalar;  // without the surrogates, which UTF-8 never encodes
  for (auto [a, b] : merged) {
    if (a < 0xD800 && b >= 0xD800) scalar.emplace_back(a, 0xD7FF);
    if (b > 0xDFFF && a <= 0xDFFF) scalar.emplace_back(0xE000, b);
    if (b < 0xD800 || a > 0xDFFF) scalar.emplace_back(a, b);
  }
  std::vector<std::vector<std::pair<int, int>>> seqs;
  for (auto [a, b] : scalar) utf8_sequences(a, b, seqs);
  if (seqs.empty()) throw input_error(hint + ": a character class that matches no character");
  const std::int32_t r = fresh(hint + "-char");
  std::bitset<256> single;
  for (const auto& seq : seqs) {
    if (seq.size() == 1) {
      for (int b = seq[0].first; b <= seq[0].second; ++b) single.set(std::size_t(b));
      continue;
    }
    std::vector<element> alt;
    for (auto [a, b] : seq) {
      std::bitset<256> s;
      for (int x = a; x <= b; ++x) s.set(std::size_t(x));
      alt.push_back(bytes(s));
    }
    add(r, alt);
  }
  if (single.any()) add(r, {bytes(single)});
  return r;
}

std::int32_t grammar_builder::import(const grammar& g, const std::string& hint) {
  std::vector<std::int32_t> ids(g.rules());
  for (std::size_t r = 0; r < g.rules(); ++r) ids[r] = fresh(hint + g.rule_name(std::int32_t(r)));
  for (std::size_t r = 0; r < g.rules(); ++r)
    for (const std::int32_t first : g.alternatives(std::int32_t(r))) {
      std::vector<element> seq;
      for (std::size_t i = std::size_t(first); g.elements()[i].k != kind::end; ++i) {
        const element& e = g.elements()[i];
        seq.push_back(e.k == kind::bytes ? bytes(g.set(e.arg)) : ref(ids[std::size_t(e.arg)]));
      }
      add(ids[r], std::move(seq));
    }
  return ids[std::size_t(g.root())];
}

std::shared_ptr<const grammar> grammar_builder::build(std::int32_t root) {
  const std::size_t nr = g_.alts_.size();
  for (const element& e : g_.elements_)
    if (e.k == kind::rule && g_.alts_[std::size_t(e.arg)].empty())
      throw input_error("grammar rule '" + g_.names_[std::size_t(e.arg)] + "' is used but never defined");
  if (g_.alts_[std::size_t(root)].empty()) throw input_error("grammar rule '" + g_.names_[std::size_t(root)] + "' is empty");
  // Nullable rules, then the rules each can begin with (through nullable prefixes): a cycle there
  // is left recursion, which the matcher would expand forever.
  // The fewest bytes each rule matches (saturating: 255 stands for 255 or more), to a fixed
  // point; a nullable rule is one that can match none.
  auto& least = g_.min_bytes_;
  least.assign(nr, 255);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < nr; ++r)
      for (std::int32_t a : g_.alts_[r]) {
        int n = 0;
        for (std::int32_t i = a; g_.elements_[std::size_t(i)].k != kind::end && n < 255; ++i) {
          const element& e = g_.elements_[std::size_t(i)];
          n += e.k == kind::bytes ? 1 : least[std::size_t(e.arg)];
        }
        if (n < least[r]) {
          least[r] = std::uint8_t(n);
          changed = true;
        }
      }
  }
  auto nullable = [&](std::size_t r) { return least[r] == 0; };
  std::vector<std::vector<std::int32_t>> begins(nr);
  for (std::size_t r = 0; r < nr; ++r)
    for (std::int32_t a : g_.alts_[r])
      for (std::int32_t i = a; g_.elements_[std::size_t(i)].k == kind::rule; ++i) {
        begins[r].push_back(g_.elements_[std::size_t(i)].arg);
        if (!nullable(std::size_t(g_.elements_[std::size_t(i)].arg))) break;
      }
  std::vector<std::uint8_t> mark(nr, 0);  // 0 new, 1 on the path, 2 done
  for (std::size_t start = 0; start < nr; ++start) {
    if (mark[start]) continue;
    std::vector<std::pair<std::int32_t, std::size_t>> path{{std::int32_t(start), 0}};
    mark[start] = 1;
    while (!path.empty()) {  // iterative depth-first search: a deep grammar must not overflow
      auto& [r, next] = path.back();
      if (next == begins[std::size_t(r)].size()) {
        mark[std::size_t(r)] = 2;
        path.pop_back();
        continue;
      }
      const std::int32_t s = begins[std::size_t(r)][next++];
      if (mark[std::size_t(s)] == 1) throw input_error("grammar rule '" + g_.names_[std::size_t(s)] + "' is left-recursive");
      if (mark[std::size_t(s)] == 0) {
        mark[std::size_t(s)] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
  g_.root_ = root;
  return std::make_shared<const grammar>(g_);
}

// ---- matcher ----

grammar_matcher::grammar_matcher(std::shared_ptr<const grammar> g) : g_(std::move(g)) {
  for (std::int32_t a : g_->alternatives(g_->root())) {
    stack s;
    if (g_->elements()[std::size_t(a)].k != kind::end) s.push_back(a);
    expand(*g_, s, stacks_);
  }
  normalise(*g_, stacks_);
}

bool grammar_matcher::step(const grammar& g, const std::vector<stack>& from, unsigned char b, std::vector<stack>& to) {
  to.clear();
  stack s;
  for (const stack& f : from) {
    if (f.empty()) continue;
    const std::int32_t top = f.back();
    const element& e = g.elements()[std::size_t(top)];
    if (e.k != kind::bytes) continue;  // a reference kept on top past the depth budget
    if (!g.set(e.arg).test(b)) continue;
    s.assign(f.begin(), f.end() - 1);
    if (g.elements()[std::size_t(top) + 1].k != kind::end) s.push_back(top + 1);
    expand(g, s, to);
  }
  normalise(g, to);
  return !to.empty();
}

bool grammar_matcher::accept(unsigned char b) {
  std::vector<stack> next;
  if (!step(*g_, stacks_, b, next)) return false;
  stacks_ = std::move(next);
  return true;
}

bool grammar_matcher::accept(std::string_view bytes) {
  if (bytes.empty()) return true;
  auto next = after(bytes);
  if (!next) return false;
  stacks_ = std::move(next->stacks_);
  return true;
}

std::optional<grammar_matcher> grammar_matcher::after(std::string_view bytes) const {
  if (bytes.empty()) return *this;
  std::vector<stack> out, next;
  if (!step(*g_, stacks_, static_cast<unsigned char>(bytes[0]), out)) return std::nullopt;
  for (std::size_t i = 1; i < bytes.size(); ++i) {
    if (!step(*g_, out, static_cast<unsigned char>(bytes[i]), next)) return std::nullopt;
    out.swap(next);
  }
  return grammar_matcher(g_, std::move(out));
}

bool grammar_matcher::complete() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const stack& s) { return s.empty(); });
}

bool grammar_matcher::exhausted() const {
  return !stacks_.empty() && std::all_of(stacks_.begin(), stacks_.end(), [](const stack& s) { return s.empty(); });
}

std::string grammar_matcher::key() const {
  std::string k;
  for (const stack& s : stacks_) {
    k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(std::int32_t));
    k.append(4, '\xff');  // -1: no position is negative, so stacks cannot run together
  }
  return k;
}

}  // namespace troupe::structured
