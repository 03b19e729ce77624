#include "runtime/tokenizer/regex.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::tokenizer {

// A character class: ranges, general categories (\p{..}: one bit per category; \P{..}: each
// a set of categories the character must be outside of) and named classes, optionally negated.
struct char_class {
  enum named : unsigned { space = 1, not_space = 2, any_but_newline = 4 };
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::uint32_t categories = 0;
  std::vector<std::uint32_t> outside;
  unsigned classes = 0;
  bool negated = false;

  bool matches(char32_t c) const {
    bool hit = false;
    for (auto& r : ranges) hit = hit || (c >= r.first && c <= r.second);
    if (!hit && (categories || !outside.empty())) {
      const std::uint32_t b = 1u << unsigned(category_of(c));
      hit = (categories & b) != 0;
      for (std::uint32_t m : outside) hit = hit || (m & b) == 0;
    }
    if (!hit && classes) {
      hit = ((classes & space) && is_space(c)) || ((classes & not_space) && !is_space(c)) ||
            ((classes & any_but_newline) && c != U'\n');
    }
    return hit != negated;
  }
};

struct regex::node {
  enum kind_t { chars, concat, alt, repeat, look } kind;
  char_class cls;                             // chars
  std::vector<std::unique_ptr<node>> kids;    // concat, alt, repeat (1), look (1)
  int min = 0, max = -1;                      // repeat; max -1 = unbounded
  bool greedy = true;                         // repeat
  bool negative = false;                      // look
};

namespace {

using node = regex::node;
using cont = std::function<bool(std::size_t)>;

class parser {
 public:
  explicit parser(std::u32string p) : p_(std::move(p)) {}

  std::unique_ptr<node> parse() {
    auto n = parse_alt();
    if (i_ != p_.size()) fail("unexpected ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error("pre-tokenizer regex: " + what + " at offset " + std::to_string(i_) + " of '" + utf8_encode(p_) + "'");
  }
  bool eat(char32_t c) {
    if (i_ < p_.size() && p_[i_] == c) return ++i_, true;
    return false;
  }
  bool at_end() const { return i_ >= p_.size(); }

  std::unique_ptr<node> parse_alt() {
    auto first = parse_concat();
    if (at_end() || p_[i_] != U'|') return first;
    auto n = std::make_unique<node>();
    n->kind = node::alt;
    n->kids.push_back(std::move(first));
    while (eat(U'|')) n->kids.push_back(parse_concat());
    return n;
  }

  std::unique_ptr<node> parse_concat() {
    auto n = std::make_unique<node>();
    n->kind = node::concat;
    while (!at_end() && p_[i_] != U'|' && p_[i_] != U')') n->kids.push_back(parse_quantified());
    return n;
  }

  std::unique_ptr<node> parse_quantified() {
    auto atom = parse_atom();
    for (;;) {
      int mn, mx;
      if (eat(U'?')) mn = 0, mx = 1;
      else if (eat(U'*')) mn = 0, mx = -1;
      else if (eat(U'+')) mn = 1, mx = -1;
      else if (!at_end() && p_[i_] == U'{' && parse_braces(mn, mx)) {}
      else return atom;
      auto r = std::make_unique<node>();
      r->kind = node::repeat;
      r->min = mn;
      r->max = mx;
      if (eat(U'?')) r->greedy = false;
      else eat(U'+');  // possessive: treated as greedy
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  bool parse_braces(int& mn, int& mx) {
    std::size_t save = i_;
    ++i_;
    auto number = [&](int& v) {
      std::size_t start = i_;
      v = 0;
      while (!at_end() && p_[i_] >= U'0' && p_[i_] <= U'9') v = v * 10 + int(p_[i_++] - U'0');
      return i_ > start;
    };
    if (!number(mn)) return i_ = save, false;
    mx = mn;
    if (eat(U',')) {
      if (!number(mx)) mx = -1;
    }
    if (!eat(U'}')) return i_ = save, false;
    return true;
  }

  std::unique_ptr<node> chars(char_class c) {
    auto n = std::make_unique<node>();
    n->kind = node::chars;
    n->cls = std::move(c);
    return n;
  }

  std::unique_ptr<node> parse_atom() {
    if (at_end()) fail("unexpected end");
    char32_t c = p_[i_++];
    if (c == U'(') {
      bool saved_ci = case_insensitive_;
      std::unique_ptr<node> n;
      if (eat(U'?')) {
        if (eat(U':')) {
          n = parse_alt();
        } else if (eat(U'i')) {
          if (!eat(U':')) fail("only (?i:...) groups are supported");
          case_insensitive_ = true;
          n = parse_alt();
        } else if (eat(U'!') || (i_ > 0 && p_[i_ - 1] == U'?' && eat(U'='))) {
          bool neg = p_[i_ - 1] == U'!';
          n = std::make_unique<node>();
          n->kind = node::look;
          n->negative = neg;
          n->kids.push_back(parse_alt());
        } else {
          fail("unsupported group construct");
        }
      } else {
        n = parse_alt();
      }
      case_insensitive_ = saved_ci;
      if (!eat(U')')) fail("missing ')'");
      return n;
    }
    if (c == U'[') return chars(parse_class());
    if (c == U'.') {
      char_class cc;
      cc.classes = char_class::any_but_newline;
      return chars(cc);
    }
    if (c == U'\\') {
      char_class cc;
      escape(cc);
      return chars(cc);
    }
    if (c == U'^' || c == U'$') fail("anchors are not supported");
    char_class cc;
    add_literal(cc, c);
    return chars(cc);
  }

  // Under (?i:...), the ASCII letters of [lo, hi] in the other case (the patterns the families
  // ship fold ASCII only: 's, 't, 're ...).
  static void add_other_case(char_class& cc, char32_t lo, char32_t hi) {
    const auto fold = [&](char32_t a, char32_t z, int shift) {
      const char32_t l = std::max(lo, a), h = std::min(hi, z);
      if (l <= h) cc.ranges.push_back({char32_t(int(l) + shift), char32_t(int(h) + shift)});
    };
    fold(U'a', U'z', -32);
    fold(U'A', U'Z', 32);
  }

  void add_literal(char_class& cc, char32_t c) {
    cc.ranges.push_back({c, c});
    if (case_insensitive_) {
      if (c >= U'a' && c <= U'z') cc.ranges.push_back({c - 32, c - 32});
      else if (c >= U'A' && c <= U'Z') cc.ranges.push_back({c + 32, c + 32});
    }
  }

  // After a backslash: a shorthand class or an escaped character, added to cc.
  void escape(char_class& cc) {
    if (at_end()) fail("dangling backslash");
    char32_t e = p_[i_++];
    switch (e) {
      case U's': cc.classes |= char_class::space; return;
      case U'S': cc.classes |= char_class::not_space; return;
      case U'p':
      case U'P': {
        if (!eat(U'{')) fail("expected '{' after \\p");
        std::u32string name;
        while (!at_end() && p_[i_] != U'}') name.push_back(p_[i_++]);
        if (!eat(U'}')) fail("missing '}' in \\p{...}");
        bool neg = e == U'P';
        if (!name.empty() && name[0] == U'^') neg = !neg, name.erase(0, 1);  // \p{^L}: Oniguruma's negation
        const std::uint32_t mask = category_mask(name);
        if (mask == 0) fail("unsupported Unicode class \\p{" + utf8_encode(name) + "} (general categories only, not scripts)");
        if (neg) cc.outside.push_back(mask);
        else cc.categories |= mask;
        return;
      }
      case U'r': add_literal(cc, U'\r'); return;
      case U'n': add_literal(cc, U'\n'); return;
      case U't': add_literal(cc, U'\t'); return;
      case U'f': add_literal(cc, U'\f'); return;
      case U'v': add_literal(cc, U'\v'); return;
      case U'd': case U'D': case U'w': case U'W': case U'b': case U'B':
        fail(std::string("unsupported escape \\") + char(e));
      default: add_literal(cc, e); return;
    }
  }

  char_class parse_class() {
    char_class cc;
    if (eat(U'^')) cc.negated = true;
    bool first = true;
    while (!at_end() && (p_[i_] != U']' || first)) {
      first = false;
      char32_t c = p_[i_++];
      if (c == U'\\') {
        if (!at_end() && (p_[i_] == U's' || p_[i_] == U'S' || p_[i_] == U'p' || p_[i_] == U'P')) {
          escape(cc);
          continue;
        }
        char_class one;
        escape(one);
        c = one.ranges.at(0).first;
      } else if (c == U'[') {
        fail("nested classes are not supported");
      }
      if (i_ + 1 < p_.size() && p_[i_] == U'-' && p_[i_ + 1] != U']') {
        ++i_;
        char32_t hi = p_[i_++];
        if (hi == U'\\') {
          char_class one;
          escape(one);
          hi = one.ranges.at(0).first;
        }
        if (hi < c) fail("a range from a higher to a lower character");
        cc.ranges.push_back({c, hi});
        if (case_insensitive_) add_other_case(cc, c, hi);
      } else {
        add_literal(cc, c);
      }
    }
    if (!eat(U']')) fail("missing ']'");
    return cc;
  }

  std::u32string p_;
  std::size_t i_ = 0;
  bool case_insensitive_ = false;
};

class matcher {
 public:
  explicit matcher(const std::u32string& s) : s_(s) {}

  bool match(const node* n, std::size_t i, const cont& k) const {
    switch (n->kind) {
      case node::chars:
        return i < s_.size() && n->cls.matches(s_[i]) && k(i + 1);
      case node::concat:
        return seq(n, 0, i, k);
      case node::alt:
        for (auto& kid : n->kids)
          if (match(kid.get(), i, k)) return true;
        return false;
      case node::look: {
        bool found = match(n->kids[0].get(), i, [](std::size_t) { return true; });
        return found != n->negative && k(i);
      }
      case node::repeat:
        if (n->kids[0]->kind == node::chars) return repeat_chars(n, i, k);
        return repeat(n, 0, i, k);
    }
    return false;
  }

 private:
  bool seq(const node* n, std::size_t idx, std::size_t i, const cont& k) const {
    if (idx == n->kids.size()) return k(i);
    return match(n->kids[idx].get(), i, [&](std::size_t j) { return seq(n, idx + 1, j, k); });
  }

  // Fast path: a quantified single class needs no recursion per character.
  bool repeat_chars(const node* n, std::size_t i, const cont& k) const {
    const char_class& cc = n->kids[0]->cls;
    std::size_t limit = n->max < 0 ? s_.size() - i : std::min<std::size_t>(std::size_t(n->max), s_.size() - i);
    std::size_t count = 0;
    if (n->greedy) {
      while (count < limit && cc.matches(s_[i + count])) ++count;
      for (std::size_t c = count + 1; c-- > std::size_t(n->min);)
        if (k(i + c)) return true;
      return false;
    }
    for (std::size_t c = 0;; ++c) {
      if (c >= std::size_t(n->min) && k(i + c)) return true;
      if (c >= limit || !cc.matches(s_[i + c])) return false;
    }
  }

  bool repeat(const node* n, int count, std::size_t i, const cont& k) const {
    auto more = [&] {
      if (n->max >= 0 && count >= n->max) return false;
      return match(n->kids[0].get(), i, [&](std::size_t j) {
        if (j == i && count >= n->min) return false;  // no progress: stop looping
        return repeat(n, count + 1, j, k);
      });
    };
    if (n->greedy) return more() || (count >= n->min && k(i));
    return (count >= n->min && k(i)) || more();
  }

  const std::u32string& s_;
};

}  // namespace

regex::regex(std::string_view pattern) : root_(parser(utf8_decode(pattern)).parse()) {}
regex::~regex() = default;
regex::regex(regex&&) noexcept = default;
regex& regex::operator=(regex&&) noexcept = default;

bool regex::search(const std::u32string& s, std::size_t from, std::size_t& begin, std::size_t& end) const {
  matcher m(s);
  for (std::size_t start = from; start <= s.size(); ++start) {
    std::size_t match_end = 0;
    if (m.match(root_.get(), start, [&](std::size_t e) { match_end = e; return true; })) {
      begin = start;
      end = match_end;
      return true;
    }
  }
  return false;
}

}  // namespace troupe::tokenizer
