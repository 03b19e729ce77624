#include "runtime/structured/regex.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>
#include <string>

#include "runtime/common/error.h"

namespace troupe::structured {

namespace {

using byteset = std::bitset<256>;

// The pattern's tree. A character is a sequence of byte sets (UTF-8); `.` and negations are
// alternatives of such sequences.
struct node {
  enum kind { bytes, concat, alt, repeat } k = concat;
  byteset set;                        // bytes
  std::vector<std::unique_ptr<node>> kids;  // concat, alt; repeat: one
  int min = 0, max = 0;               // repeat; max -1: unbounded
};
using tree = std::unique_ptr<node>;

tree make(node::kind k) {
  auto n = std::make_unique<node>();
  n->k = k;
  return n;
}
tree byte_node(const byteset& s) {
  auto n = make(node::bytes);
  n->set = s;
  return n;
}
byteset range(int lo, int hi) {
  byteset s;
  for (int b = lo; b <= hi; ++b) s.set(std::size_t(b));
  return s;
}
tree seq(std::initializer_list<byteset> sets) {
  auto n = make(node::concat);
  for (const auto& s : sets) n->kids.push_back(byte_node(s));
  return n;
}

// Every well-formed multi-byte UTF-8 character (no overlongs, no surrogates).
void add_multibyte(node& alternatives) {
  const byteset cont = range(0x80, 0xbf);
  alternatives.kids.push_back(seq({range(0xc2, 0xdf), cont}));
  alternatives.kids.push_back(seq({range(0xe0, 0xe0), range(0xa0, 0xbf), cont}));
  byteset e = range(0xe1, 0xec);
  e |= range(0xee, 0xef);
  alternatives.kids.push_back(seq({e, cont, cont}));
  alternatives.kids.push_back(seq({range(0xed, 0xed), range(0x80, 0x9f), cont}));
  alternatives.kids.push_back(seq({range(0xf0, 0xf0), range(0x90, 0xbf), cont, cont}));
  alternatives.kids.push_back(seq({range(0xf1, 0xf3), cont, cont, cont}));
  alternatives.kids.push_back(seq({range(0xf4, 0xf4), range(0x80, 0x8f), cont, cont}));
}

// One character from an ASCII set, or (negated) any character outside it, multi-byte ones included.
tree char_class(const byteset& ascii, bool negated) {
  if (!negated) return byte_node(ascii);
  auto n = make(node::alt);
  n->kids.push_back(byte_node(range(0, 0x7f) & ~ascii));
  add_multibyte(*n);
  return n;
}

class parser {
 public:
  parser(std::string_view p, const regex_budget& b) : p_(p), budget_(b) {}

  tree parse() {
    tree t = alternation(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    return t;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error("pattern: " + what + " at offset " + std::to_string(i_));
  }
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }

  tree alternation(int depth) {
    if (depth > budget_.max_depth) fail("groups nested deeper than " + std::to_string(budget_.max_depth));
    auto n = make(node::alt);
    n->kids.push_back(concatenation(depth));
    while (at('|')) {
      ++i_;
      n->kids.push_back(concatenation(depth));
    }
    return n->kids.size() == 1 ? std::move(n->kids[0]) : std::move(n);
  }

  tree concatenation(int depth) {
    auto n = make(node::concat);
    while (i_ < p_.size() && !at('|') && !at(')')) n->kids.push_back(repetition(depth));
    return n;
  }

  tree repetition(int depth) {
    tree t = atom(depth);
    for (int stacked = 0;; ++stacked) {
      if (stacked > budget_.max_depth) fail("quantifiers stacked deeper than " + std::to_string(budget_.max_depth));
      int lo, hi;
      if (at('*')) lo = 0, hi = -1, ++i_;
      else if (at('+')) lo = 1, hi = -1, ++i_;
      else if (at('?')) lo = 0, hi = 1, ++i_;
      else if (at('{') && bounds(lo, hi)) {
      } else break;
      if (at('?')) ++i_;  // lazy: the same language
      else if (at('+')) fail("possessive quantifiers are not supported");
      auto r = make(node::repeat);
      r->min = lo, r->max = hi;
      r->kids.push_back(std::move(t));
      t = std::move(r);
    }
    return t;
  }

  // {n}, {n,}, {n,m}; false (and nothing consumed) where '{' is not a quantifier.
  bool bounds(int& lo, int& hi) {
    std::size_t j = i_ + 1;
    // Every digit is read: a count too large for the automaton is refused, never reread as text.
    auto number = [&](int& v) {
      const std::size_t from = j;
      long long x = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        x = std::min<long long>(x * 10 + (p_[j++] - '0'), 1LL << 40);
      }
      if (j > from && x > budget_.max_nfa_states)
        fail("the repetition count " + std::string(p_.substr(from, std::min<std::size_t>(j - from, 20))) +
             (j - from > 20 ? "..." : "") + " is above " + std::to_string(budget_.max_nfa_states) + ", what the automaton may hold");
      v = int(x);
      return j > from;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    if (hi >= 0 && hi < lo) fail("{" + std::to_string(lo) + "," + std::to_string(hi) + "}: the bound is below the count");
    i_ = j + 1;
    return true;
  }

  tree atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (at('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') i_ += 2;
        else fail("lookaround and named groups are not supported");
      }
      tree t = alternation(depth + 1);
      if (!at(')')) fail("missing ')'");
      ++i_;
      return t;
    }
    if (c == '[') return bracket();
    if (c == '.') {
      ++i_;
      return char_class(range('\n', '\n'), true);
    }
    if (c == '\\') return escape();
    if (c == '^' && i_ == 0) return ++i_, make(node::concat);
    if (c == '$' && i_ + 1 == p_.size()) return ++i_, make(node::concat);
    if (c == '^' || c == '$') fail(std::string("'") + c + "' is only supported at the pattern's ends");
    if (c == '*' || c == '+' || c == '?') fail(std::string("'") + c + "' has nothing to repeat");
    if (c == '{' ) {
      int lo, hi;
      if (bounds(lo, hi)) fail("a quantifier with nothing to repeat");
    }
    // A literal character: all of its UTF-8 bytes, so that a quantifier repeats the character.
    auto n = make(node::concat);
    const auto lead = static_cast<unsigned char>(c);
    const std::size_t len = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    for (std::size_t k = 0; k < len && i_ < p_.size(); ++k) {
      const auto b = static_cast<unsigned char>(p_[i_++]);
      n->kids.push_back(byte_node(range(b, b)));
    }
    return n;
  }

  // \d \w \s and their negations; false if `e` is none of them.
  static bool shorthand(char e, byteset& s, bool& negated) {
    switch (e) {
      case 'd': case 'D': s = range('0', '9'); break;
      case 'w': case 'W': s = range('0', '9') | range('a', 'z') | range('A', 'Z') | range('_', '_'); break;
      case 's': case 'S': s = range(' ', ' ') | range('\t', '\r'); break;
      default: return false;
    }
    negated = e == 'D' || e == 'W' || e == 'S';
    return true;
  }

  // The byte an escape stands for (\n, \x41, \., ...), after the backslash.
  unsigned char escaped_byte() {
    if (i_ >= p_.size()) fail("a pattern cannot end in '\\'");
    const char e = p_[i_++];
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': {
        auto hex = [](char h) { return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1; };
        if (i_ + 2 > p_.size() || hex(p_[i_]) < 0 || hex(p_[i_ + 1]) < 0) fail("\\x needs two hex digits");
        const int v = hex(p_[i_]) * 16 + hex(p_[i_ + 1]);
        if (v > 0x7f) fail("\\x above 7f is not supported");
        i_ += 2;
        return (unsigned char)v;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9'))
          --i_, fail(std::string("the escape \\") + e + " is not supported");
        if (static_cast<unsigned char>(e) >= 0x80) --i_, fail("escaped non-ASCII characters are not supported");
        return static_cast<unsigned char>(e);
    }
  }

  tree escape() {
    ++i_;
    if (i_ >= p_.size()) fail("a pattern cannot end in '\\'");
    byteset s;
    bool negated = false;
    if (shorthand(p_[i_], s, negated)) return ++i_, char_class(s, negated);
    const unsigned char b = escaped_byte();
    return byte_node(range(b, b));
  }

  tree bracket() {
    const std::size_t open = i_++;
    const bool negated = at('^');
    if (negated) ++i_;
    byteset s;
    bool first = true;
    while (i_ < p_.size() && (first || !at(']'))) {
      first = false;
      int lo;
      if (at('\\')) {
        ++i_;
        if (i_ >= p_.size()) break;
        byteset sh;
        bool neg = false;
        if (shorthand(p_[i_], sh, neg)) {
          if (neg) fail("negated shorthands inside a class are not supported");
          s |= sh, ++i_;
          continue;
        }
        lo = escaped_byte();
      } else {
        lo = static_cast<unsigned char>(p_[i_++]);
      }
      if (lo >= 0x80) --i_, fail("non-ASCII characters in a class are not supported");
      int hi = lo;
      if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        if (at('\\')) ++i_, hi = escaped_byte();
        else hi = static_cast<unsigned char>(p_[i_++]);
        if (hi >= 0x80) --i_, fail("non-ASCII characters in a class are not supported");
        if (hi < lo) fail("a class range runs backwards");
      }
      s |= range(lo, hi);
    }
    if (!at(']')) {
      i_ = open;
      fail("missing ']'");
    }
    ++i_;
    return char_class(s, negated);
  }

  std::string_view p_;
  const regex_budget& budget_;
  std::size_t i_ = 0;
};

// Thompson's construction: a state either moves on a byte set to `to`, or only by epsilons.
struct nfa {
  struct state {
    byteset on;
    int to = -1;
    std::vector<int> eps;
  };
  std::vector<state> states;
  int limit = 0;
  int final_state = -1;

  int add() {
    if (int(states.size()) >= limit)
      throw input_error("pattern: its automaton passes " + std::to_string(limit) + " states (repetition counts too large?)");
    states.emplace_back();
    return int(states.size()) - 1;
  }
  struct frag {
    int in, out;
  };
  frag build(const node& n) {
    switch (n.k) {
      case node::bytes: {
        const int a = add(), b = add();
        states[std::size_t(a)].on = n.set, states[std::size_t(a)].to = b;
        return {a, b};
      }
      case node::concat: {
        const int a = add();
        int end = a;
        for (const auto& k : n.kids) {
          const frag f = build(*k);
          states[std::size_t(end)].eps.push_back(f.in);
          end = f.out;
        }
        return {a, end};
      }
      case node::alt: {
        const int a = add(), b = add();
        for (const auto& k : n.kids) {
          const frag f = build(*k);
          states[std::size_t(a)].eps.push_back(f.in);
          states[std::size_t(f.out)].eps.push_back(b);
        }
        return {a, b};
      }
      case node::repeat: {
        const int a = add();
        int end = a;
        for (int r = 0; r < n.min; ++r) {
          const frag f = build(*n.kids[0]);
          states[std::size_t(end)].eps.push_back(f.in);
          end = f.out;
        }
        const int b = add();
        if (n.max < 0) {  // then any number more
          const frag f = build(*n.kids[0]);
          states[std::size_t(end)].eps.push_back(f.in);
          states[std::size_t(f.out)].eps.push_back(f.in);
          states[std::size_t(f.out)].eps.push_back(b);
        } else {
          for (int r = n.min; r < n.max; ++r) {  // each further copy optional
            const frag f = build(*n.kids[0]);
            states[std::size_t(end)].eps.push_back(f.in);
            states[std::size_t(end)].eps.push_back(b);
            end = f.out;
          }
        }
        states[std::size_t(end)].eps.push_back(b);
        return {a, b};
      }
    }
    return {-1, -1};
  }

  // The states reachable by epsilons from `set`, in time proportional to them (a stamp per
  // state instead of a fresh array: a 100,000-state automaton must not cost that much per move).
  std::vector<int> closure(std::vector<int> set) {
    if (stamp.size() != states.size()) stamp.assign(states.size(), 0);
    ++generation;
    for (int s : set) stamp[std::size_t(s)] = generation;
    for (std::size_t k = 0; k < set.size(); ++k)
      for (int e : states[std::size_t(set[k])].eps)
        if (stamp[std::size_t(e)] != generation) stamp[std::size_t(e)] = generation, set.push_back(e);
    // What tells two closures apart: the states that move on a byte, and the final one.
    std::vector<int> out;
    for (int s : set)
      if (states[std::size_t(s)].to >= 0 || s == final_state) out.push_back(s);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<int> stamp;
  int generation = 0;
};

}  // namespace

bool byte_dfa::matches(std::string_view text) const {
  int s = start;
  for (char c : text) {
    const auto n = step(s, static_cast<unsigned char>(c));
    if (!n) return false;
    s = *n;
  }
  return accepting[std::size_t(s)];
}

byte_dfa compile_regex(std::string_view pattern, const regex_budget& budget) {
  const tree t = parser(pattern, budget).parse();
  nfa n;
  n.limit = budget.max_nfa_states;
  const auto f = n.build(*t);
  n.final_state = f.out;
  // Subset construction over the byte-moving states of each closure (and the final state).
  byte_dfa d;
  std::map<std::vector<int>, int> index;
  std::vector<std::vector<int>> sets;
  auto intern = [&](std::vector<int> set) {
    auto [it, fresh] = index.emplace(std::move(set), int(sets.size()));
    if (fresh) {
      if (int(sets.size()) >= budget.max_dfa_states)
        throw input_error("pattern: its automaton passes " + std::to_string(budget.max_dfa_states) + " DFA states");
      sets.push_back(it->first);
      d.next.resize(sets.size() * 256, -1);
      d.accepting.push_back(std::binary_search(it->first.begin(), it->first.end(), n.final_state));
    }
    return it->second;
  };
  d.start = intern(n.closure({f.in}));
  std::uint64_t work = 0;
  for (std::size_t k = 0; k < sets.size(); ++k) {
    work += 256 * sets[k].size();
    if (work > budget.max_work)
      throw input_error("pattern: building its automaton passes the work budget of " + std::to_string(budget.max_work) + " steps");
    for (int b = 0; b < 256; ++b) {
      std::vector<int> moved;
      for (int s : sets[k]) {
        const auto& st = n.states[std::size_t(s)];
        if (st.to >= 0 && st.on.test(std::size_t(b))) moved.push_back(st.to);
      }
      if (moved.empty()) continue;
      work += moved.size();
      const int target = intern(n.closure(std::move(moved)));
      d.next[k * 256 + std::size_t(b)] = target;
    }
  }
  return d;
}

}  // namespace troupe::structured
