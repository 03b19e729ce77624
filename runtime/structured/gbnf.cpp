#include "runtime/structured/gbnf.h"

#include <string>
#include <vector>

#include "runtime/common/error.h"

namespace troupe::structured {

namespace {

using element = grammar::element;
using sequence = std::vector<element>;

constexpr int max_nesting = 100;  // parentheses: the parser recurses once per level

std::string utf8(std::uint32_t c) {
  std::string s;
  if (c < 0x80) s += char(c);
  else if (c < 0x800) s += char(0xC0 | (c >> 6)), s += char(0x80 | (c & 0x3F));
  else if (c < 0x10000) s += char(0xE0 | (c >> 12)), s += char(0x80 | ((c >> 6) & 0x3F)), s += char(0x80 | (c & 0x3F));
  else
    s += char(0xF0 | (c >> 18)), s += char(0x80 | ((c >> 12) & 0x3F)), s += char(0x80 | ((c >> 6) & 0x3F)),
        s += char(0x80 | (c & 0x3F));
  return s;
}

class gbnf_parser {
 public:
  gbnf_parser(std::string_view text, grammar_builder& b) : t_(text), b_(b) {}

  std::shared_ptr<const grammar> run() {
    for (;;) {
      space(true);
      if (at_end()) break;
      const std::string name = rule_name();
      space(false);
      if (!eat("::=")) fail("expected ::= after the rule name '" + name + "'");
      space(true);
      const std::int32_t r = b_.rule(name);
      if (defined_.size() <= std::size_t(r)) defined_.resize(std::size_t(r) + 1, false);
      if (defined_[std::size_t(r)]) fail("rule '" + name + "' is defined twice");
      defined_[std::size_t(r)] = true;
      for (auto& seq : alternatives(0)) b_.add(r, std::move(seq));
      space(false);
      if (!at_end() && peek() != '\n') fail(std::string("unexpected '") + peek() + "'");
    }
    const std::int32_t root = b_.rule("root");
    if (!b_.has_alternatives(root)) throw input_error("GBNF: the grammar has no 'root' rule (the start rule)");
    return b_.build(root);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1, col = 1;
    for (std::size_t i = 0; i < p_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    throw input_error("GBNF line " + std::to_string(line) + " column " + std::to_string(col) + ": " + what);
  }
  bool at_end() const { return p_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[p_]; }
  bool eat(std::string_view s) {
    if (t_.substr(p_, s.size()) != s) return false;
    p_ += s.size();
    return true;
  }
  // Blanks and comments; newlines only where a rule may continue on the next line.
  void space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) ++p_;
      else if (c == '#')
        while (!at_end() && peek() != '\n') ++p_;
      else break;
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string rule_name() {
    const std::size_t s = p_;
    while (!at_end() && name_char(peek())) ++p_;
    if (s == p_) fail(std::string("expected a rule name, got '") + peek() + "'");
    return std::string(t_.substr(s, p_ - s));
  }
  std::uint32_t hex(int digits) {
    std::uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++p_) {
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("expected " + std::to_string(digits) + " hexadecimal digits");
      v = v * 16 + std::uint32_t(d);
    }
    return v;
  }
  // One character of a literal or class: an escape, or a UTF-8 sequence decoded.
  std::uint32_t character() {
    if (at_end()) fail("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(t_[p_]);
    if (c == '\\') {
      ++p_;
      const char e = peek();
      ++p_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return std::uint32_t(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: --p_; fail(std::string("unknown escape \\") + e);
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || p_ + std::size_t(len) > t_.size()) fail("the grammar is not valid UTF-8");
    std::uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) {
      const unsigned char k = static_cast<unsigned char>(t_[p_ + std::size_t(i)]);
      if ((k & 0xC0) != 0x80) fail("the grammar is not valid UTF-8");
      v = (v << 6) | (k & 0x3F);
    }
    p_ += std::size_t(len);
    return v;
  }

  std::vector<sequence> alternatives(int depth) {
    if (depth > max_nesting) fail("parentheses nested deeper than " + std::to_string(max_nesting));
    std::vector<sequence> alts;
    alts.push_back(seq(depth));
    while (peek() == '|') {
      ++p_;
      space(true);
      alts.push_back(seq(depth));
    }
    return alts;
  }

  sequence seq(int depth) {
    sequence out;
    for (;;) {
      space(depth > 0);
      const char c = peek();
      sequence unit;
      if (c == '"') {
        ++p_;
        std::string lit;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("a string literal is not closed");
          lit += utf8(character());
        }
        ++p_;
        b_.literal(unit, lit);
      } else if (c == '[') {
        ++p_;
        const bool negated = peek() == '^';
        if (negated) ++p_;
        std::vector<grammar_builder::code_range> ranges;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail("a character class is not closed");
          const std::uint32_t a = character();
          std::uint32_t z = a;
          if (peek() == '-' && p_ + 1 < t_.size() && t_[p_ + 1] != ']') {
            ++p_;
            z = character();
            if (z < a) fail("a character range runs backwards");
          }
          ranges.emplace_back(a, z);
        }
        ++p_;
        unit.push_back(grammar_builder::ref(b_.char_class(ranges, negated, "class")));
      } else if (c == '.') {
        ++p_;
        unit.push_back(grammar_builder::ref(b_.char_class({}, true, "any")));
      } else if (c == '(') {
        ++p_;
        space(true);
        const std::int32_t g = b_.fresh("group");
        for (auto& s : alternatives(depth + 1)) b_.add(g, std::move(s));
        space(true);
        if (peek() != ')') fail("expected ')'");
        ++p_;
        unit.push_back(grammar_builder::ref(g));
      } else if (name_char(c)) {
        const std::size_t at = p_;
        const std::string name = rule_name();
        const std::size_t after = p_;
        space(false);
        if (eat("::=")) {  // the next rule: this sequence ended at the line before
          p_ = at;
          return out;
        }
        p_ = after;
        unit.push_back(grammar_builder::ref(b_.rule(name)));
      } else {
        return out;  // '|', ')', end of line or of the text: the caller decides
      }
      postfix(unit);
      out.insert(out.end(), unit.begin(), unit.end());
    }
  }

  int number() {
    long v = 0;
    const std::size_t s = p_;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 100000) fail("a repetition count above 100000");
      ++p_;
    }
    if (s == p_) fail("expected a number");
    return int(v);
  }

  void postfix(sequence& unit) {
    int min = 1, max = 1;
    const char c = peek();
    if (c == '*') min = 0, max = -1, ++p_;
    else if (c == '+') min = 1, max = -1, ++p_;
    else if (c == '?') min = 0, max = 1, ++p_;
    else if (c == '{') {
      ++p_;
      space(false);
      min = max = number();
      space(false);
      if (peek() == ',') {
        ++p_;
        space(false);
        max = peek() == '}' ? -1 : number();
        space(false);
      }
      if (peek() != '}') fail("expected '}'");
      ++p_;
    } else {
      return;
    }
    const std::int32_t r = b_.repeat(unit, min, max, "repeat");
    unit.assign(1, grammar_builder::ref(r));
  }

  std::string_view t_;
  grammar_builder& b_;
  std::size_t p_ = 0;
  std::vector<bool> defined_;
};

}  // namespace

std::shared_ptr<const grammar> parse_gbnf(std::string_view text, const grammar_budget& budget) {
  grammar_builder b(budget);
  return gbnf_parser(text, b).run();
}

}  // namespace troupe::structured
