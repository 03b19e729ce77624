#include "runtime/chat/jinja_parser.h"

#include <cctype>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "runtime/chat/jinja_lexer.h"

namespace troupe::chat::jinja {

namespace {

// ---------------------------------------------------------------------------------------------
// Expression parser (Jinja's precedence: or < and < not < comparisons < + - < ~ < * / // % <
// ** < unary < postfix, filters and tests).

// Parsing and evaluating recurse once per level of an expression's tree: a tag's length and its
// nesting are bounded so a hostile template cannot overflow the stack.
constexpr std::size_t max_tag_tokens = 1024;
constexpr int max_nesting = 64;

class expr_parser {
 public:
  expr_parser(std::vector<token> toks, int line) : t_(std::move(toks)), line_(line) {
    if (t_.size() > max_tag_tokens) err("a tag of more than " + std::to_string(max_tag_tokens) + " tokens");
  }

  expr_ptr expression() { return condexpr(); }
  expr_ptr expression_no_cond() { return or_expr(); }  // a for's iterable: `if` filters the loop
  bool at_end() const { return peek().t == token::type::end; }
  const token& peek(std::size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool is_name(const char* n, std::size_t k = 0) const { return peek(k).t == token::type::name && peek(k).text == n; }
  bool is_op(const char* o, std::size_t k = 0) const { return peek(k).t == token::type::op && peek(k).text == o; }
  token next() { return t_[std::min(p_++, t_.size() - 1)]; }
  void expect_op(const char* o) {
    if (!is_op(o)) err(std::string("expected '") + o + "', got '" + peek().text + "'");
    ++p_;
  }
  std::string expect_name() {
    if (peek().t != token::type::name) err("expected a name, got '" + peek().text + "'");
    return next().text;
  }
  [[noreturn]] void err(const std::string& what) const { fail("line " + std::to_string(line_) + ": " + what); }
  void expect_end() {
    if (!at_end()) err("unexpected '" + peek().text + "'");
  }

 private:
  template <class T>
  std::unique_ptr<T> make() {
    auto e = std::make_unique<T>();
    e->line = line_;
    return e;
  }

  expr_ptr binary(std::string op, expr_ptr a, expr_ptr b) {
    auto e = make<binary_expr>();
    e->op = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  expr_ptr condexpr() {
    if (++depth_ > max_nesting) err("expression nested deeper than " + std::to_string(max_nesting) + " levels");
    struct leave {
      int& d;
      ~leave() { --d; }
    } guard{depth_};
    expr_ptr e = or_expr();
    while (is_name("if")) {
      next();
      auto c = make<cond_expr>();
      c->then = std::move(e);
      c->cond = or_expr();
      if (is_name("else")) {
        next();
        c->otherwise = condexpr();
      }
      e = std::move(c);
    }
    return e;
  }
  expr_ptr or_expr() {
    expr_ptr e = and_expr();
    while (is_name("or")) {
      next();
      e = binary("or", std::move(e), and_expr());
    }
    return e;
  }
  expr_ptr and_expr() {
    expr_ptr e = not_expr();
    while (is_name("and")) {
      next();
      e = binary("and", std::move(e), not_expr());
    }
    return e;
  }
  expr_ptr not_expr() {
    if (is_name("not")) {
      next();
      auto u = make<unary_expr>();
      u->op = "not";
      u->x = not_expr();
      return u;
    }
    return compare();
  }
  expr_ptr compare() {
    expr_ptr e = math1();
    while (true) {
      static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
      bool matched = false;
      for (const char* o : ops)
        if (is_op(o)) {
          next();
          e = binary(o, std::move(e), math1());
          matched = true;
          break;
        }
      if (matched) continue;
      if (is_name("in")) {
        next();
        e = binary("in", std::move(e), math1());
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        e = binary("not in", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  expr_ptr math1() {
    expr_ptr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string o = next().text;
      e = binary(o, std::move(e), concat());
    }
    return e;
  }
  expr_ptr concat() {
    expr_ptr e = math2();
    while (is_op("~")) {
      next();
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  expr_ptr math2() {
    expr_ptr e = pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string o = next().text;
      e = binary(o, std::move(e), pow());
    }
    return e;
  }
  expr_ptr pow() {
    expr_ptr e = unary(true);
    while (is_op("**")) {
      next();
      e = binary("**", std::move(e), unary(true));
    }
    return e;
  }
  expr_ptr unary(bool with_filter) {
    expr_ptr e;
    if (is_op("-") || is_op("+")) {
      auto u = make<unary_expr>();
      u->op = next().text;
      u->x = unary(false);
      e = std::move(u);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  void args(std::vector<expr_ptr>& pos, std::vector<std::pair<std::string, expr_ptr>>& kw) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().t == token::type::name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        kw.emplace_back(k, expression());
      } else {
        pos.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
    expect_op(")");
  }
  expr_ptr postfix(expr_ptr e) {
    while (true) {
      if (is_op(".")) {
        next();
        auto g = make<getattr_expr>();
        g->obj = std::move(e);
        g->attr = peek().t == token::type::integer ? std::to_string(next().i) : expect_name();
        e = std::move(g);
      } else if (is_op("[")) {
        next();
        expr_ptr a, b, c;
        bool slice = false;
        if (!is_op(":")) a = expression();
        if (is_op(":")) {
          slice = true;
          next();
          if (!is_op("]") && !is_op(":")) b = expression();
          if (is_op(":")) {
            next();
            if (!is_op("]")) c = expression();
          }
        }
        expect_op("]");
        if (slice) {
          auto s = make<slice_expr>();
          s->obj = std::move(e);
          s->start = std::move(a);
          s->stop = std::move(b);
          s->step = std::move(c);
          e = std::move(s);
        } else {
          auto g = make<getitem_expr>();
          g->obj = std::move(e);
          g->key = std::move(a);
          e = std::move(g);
        }
      } else if (is_op("(")) {
        auto c = make<call_expr>();
        c->callee = std::move(e);
        args(c->pos, c->kw);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  expr_ptr filters(expr_ptr e) {
    while (true) {
      if (is_op("|")) {
        next();
        auto f = make<filter_expr>();
        f->obj = std::move(e);
        f->name = expect_name();
        if (is_op("(")) args(f->pos, f->kw);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make<test_expr>();
        t->obj = std::move(e);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        if (peek().t == token::type::name) t->name = next().text;
        else if (is_op("==") || is_op("!=")) t->name = next().text;
        else err("expected a test name after 'is'");
        if (is_op("(")) {
          std::vector<std::pair<std::string, expr_ptr>> kw;
          args(t->pos, kw);
        } else if ((peek().t == token::type::string || peek().t == token::type::integer || peek().t == token::type::real ||
                    (peek().t == token::type::name && !is_name("else") && !is_name("or") && !is_name("and") &&
                     !is_name("if") && !is_name("in") && !is_name("not")) ||
                    is_op("[") || is_op("{")) &&
                   t->name != "defined" && t->name != "undefined" && t->name != "callable" && t->name != "none" && t->name != "string") {
          t->pos.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  expr_ptr primary() {
    const token tk = next();
    switch (tk.t) {
      case token::type::string: {
        auto l = make<literal>();
        std::string s = tk.text;
        while (peek().t == token::type::string) s += next().text;  // adjacent literals join
        l->v = value::str(s);
        return l;
      }
      case token::type::integer: {
        auto l = make<literal>();
        l->v = value::integer(tk.i);
        return l;
      }
      case token::type::real: {
        auto l = make<literal>();
        l->v = value::real(tk.d);
        return l;
      }
      case token::type::name: {
        auto l = make<literal>();
        if (tk.text == "true" || tk.text == "True") l->v = value::boolean(true);
        else if (tk.text == "false" || tk.text == "False") l->v = value::boolean(false);
        else if (tk.text == "none" || tk.text == "None") l->v = value::none();
        else {
          auto n = make<name_ref>();
          n->name = tk.text;
          return n;
        }
        return l;
      }
      case token::type::op:
        if (tk.text == "(") {
          expr_ptr first = expression();
          if (is_op(",")) {  // a tuple: a list here
            auto l = make<list_lit>();
            l->items.push_back(std::move(first));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              l->items.push_back(expression());
            }
            expect_op(")");
            return l;
          }
          expect_op(")");
          return first;
        }
        if (tk.text == "[") {
          auto l = make<list_lit>();
          while (!is_op("]")) {
            l->items.push_back(expression());
            if (!is_op("]")) expect_op(",");
          }
          expect_op("]");
          return l;
        }
        if (tk.text == "{") {
          auto d = make<dict_lit>();
          while (!is_op("}")) {
            expr_ptr k = expression();
            expect_op(":");
            d->items.emplace_back(std::move(k), expression());
            if (!is_op("}")) expect_op(",");
          }
          expect_op("}");
          return d;
        }
        [[fallthrough]];
      default: err(tk.t == token::type::end ? "unexpected end of expression" : "unexpected '" + tk.text + "'");
    }
  }

  std::vector<token> t_;
  std::size_t p_ = 0;
  int depth_ = 0;
  int line_;
};


// A template split into text and tags, with Jinja's whitespace control applied.
struct segment {
  enum class type { text, var, block } t;
  std::string content;
  int line = 1;
};

// Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_newlines(const std::string& src) {
  std::string norm;
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      norm += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      norm += src[i];
    }
  }
  if (!norm.empty() && norm.back() == '\n') norm.pop_back();
  return norm;
}

// Where a tag opened with `kind_c` ('{', '%' or '#') and whose content starts at `inner` ends:
// the position of its `close`, outside string literals (comments: the first #}); npos if none.
std::size_t tag_end(const std::string& src, std::size_t inner, char kind_c, const std::string& close) {
  if (kind_c == '#') return src.find("#}", inner);
  char quote = 0;
  for (std::size_t q = inner; q + 1 < src.size(); ++q) {
    if (quote) {
      if (src[q] == '\\') ++q;
      else if (src[q] == quote) quote = 0;
      continue;
    }
    if (src[q] == '\'' || src[q] == '"') { quote = src[q]; continue; }
    if (src.compare(q, 2, close) == 0) return q;
  }
  return std::string::npos;
}

std::vector<segment> split(const std::string& source) {
  const std::string src = normalize_newlines(source);

  std::vector<segment> out;
  std::size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (pos < src.size()) {
    std::size_t open = std::string::npos;
    for (std::size_t q = src.find('{', pos); q != std::string::npos; q = src.find('{', q + 1))
      if (q + 1 < src.size() && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')) {
        open = q;
        break;
      }
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) {
      out.push_back({segment::type::text, text, line});
      break;
    }
    const char kind_c = src[open + 1];
    std::size_t inner = open + 2;
    char sign = 0;
    if (inner < src.size() && (src[inner] == '-' || src[inner] == '+')) sign = src[inner++];
    if (sign == '-') {
      std::size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      text.resize(e);
    } else if (sign != '+' && kind_c != '{') {  // lstrip_blocks: blocks and comments only
      const std::size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (l > 0 || line_starting) {
        const std::string tail = text.substr(l);
        if (!tail.empty() && std::all_of(tail.begin(), tail.end(), is_ws)) text.resize(l);
      }
    }
    if (!text.empty()) out.push_back({segment::type::text, text, line});
    for (std::size_t i = pos; i < open; ++i) line += src[i] == '\n';
    const int tag_line = line;

    const std::string close = kind_c == '{' ? "}}" : kind_c == '%' ? "%}" : "#}";
    const std::size_t end = tag_end(src, inner, kind_c, close);
    if (end == std::string::npos) fail("line " + std::to_string(tag_line) + ": missing '" + close + "'");
    std::size_t content_end = end;
    char end_sign = 0;
    if (content_end > inner && (src[content_end - 1] == '-' || src[content_end - 1] == '+')) end_sign = src[--content_end];
    const std::string content = src.substr(inner, content_end - inner);
    for (std::size_t i = open; i < end + 2; ++i) line += src[i] == '\n';
    pos = end + 2;
    if (end_sign == '-') {
      while (pos < src.size() && is_ws(src[pos])) line += src[pos++] == '\n';
    } else if (end_sign != '+' && kind_c != '{' && pos < src.size() && src[pos] == '\n') {  // trim_blocks
      ++pos;
      ++line;
    }
    line_starting = pos > 0 && src[pos - 1] == '\n';
    if (kind_c == '{') out.push_back({segment::type::var, content, tag_line});
    else if (kind_c == '%') out.push_back({segment::type::block, content, tag_line});
  }
  return out;
}

class template_parser {
 public:
  explicit template_parser(std::vector<segment> segs) : s_(std::move(segs)) {}

  body parse_all() {
    body b = parse_until({});
    if (p_ < s_.size()) fail("line " + std::to_string(s_[p_].line) + ": unexpected '" + keyword(s_[p_]) + "'");
    return b;
  }

 private:
  static std::string keyword(const segment& s) {
    std::size_t a = s.content.find_first_not_of(" \t\n");
    if (a == std::string::npos) return "";
    std::size_t b = a;
    while (b < s.content.size() && (std::isalnum(static_cast<unsigned char>(s.content[b])) || s.content[b] == '_')) ++b;
    return s.content.substr(a, b - a);
  }

  // Parses nodes until a block tag whose keyword is in `stops` (left unconsumed).
  body parse_until(const std::vector<std::string>& stops) {
    body b;
    while (p_ < s_.size()) {
      const segment& seg = s_[p_];
      if (seg.t == segment::type::text) {
        auto t = std::make_unique<text_node>();
        t->text = seg.content;
        b.push_back(std::move(t));
        ++p_;
        continue;
      }
      if (seg.t == segment::type::var) {
        expr_parser ep(tokenize(seg.content, seg.line), seg.line);
        auto o = std::make_unique<output_node>();
        o->e = ep.expression();
        ep.expect_end();
        b.push_back(std::move(o));
        ++p_;
        continue;
      }
      const std::string kw = keyword(seg);
      if (std::find(stops.begin(), stops.end(), kw) != stops.end()) return b;
      b.push_back(statement());
    }
    if (!stops.empty()) fail("unexpected end of template: missing {% " + stops.back() + " %}");
    return b;
  }

  node_ptr statement() {
    const segment seg = s_[p_++];
    if (++depth_ > max_nesting)
      fail("line " + std::to_string(seg.line) + ": blocks nested deeper than " + std::to_string(max_nesting) + " levels");
    struct leave {
      int& d;
      ~leave() { --d; }
    } guard{depth_};
    expr_parser ep(tokenize(seg.content, seg.line), seg.line);
    const std::string kw = ep.expect_name();
    if (kw == "if") return if_statement(ep);
    if (kw == "for") return for_statement(ep);
    if (kw == "set") return set_statement(ep);
    if (kw == "macro") return macro_statement(ep, seg.line);
    if (kw == "break" || kw == "continue") {
      auto n = std::make_unique<break_node>();
      n->is_break = kw == "break";
      ep.expect_end();
      return n;
    }
    ep.err("unknown or unsupported statement '" + kw + "'");
  }

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}
  node_ptr if_statement(expr_parser& ep) {
    auto n = std::make_unique<if_node>();
    expr_ptr cond = ep.expression();
    ep.expect_end();
    while (true) {
      body b = parse_until({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(b));
      const segment& at = s_[p_];
      expr_parser tp(tokenize(at.content, at.line), at.line);
      const std::string k = tp.expect_name();
      ++p_;
      if (k == "elif") {
        cond = tp.expression();
        tp.expect_end();
        continue;
      }
      if (k == "else") {
        tp.expect_end();
        n->otherwise = parse_until({"endif"});
        ++p_;
      }
      break;
    }
    return n;
  }

  // {% for a, b in xs if cond %} ... {% else %} ... {% endfor %}
  node_ptr for_statement(expr_parser& ep) {
    auto n = std::make_unique<for_node>();
    n->vars.push_back(ep.expect_name());
    while (ep.is_op(",")) {
      ep.next();
      n->vars.push_back(ep.expect_name());
    }
    if (!ep.is_name("in")) ep.err("expected 'in' in for");
    ep.next();
    n->iter = ep.expression_no_cond();
    if (ep.is_name("if")) {
      ep.next();
      n->filter = ep.expression();
    }
    ep.expect_end();
    n->loop_body = parse_until({"else", "endfor"});
    if (keyword(s_[p_]) == "else") {
      ++p_;
      n->otherwise = parse_until({"endfor"});
    }
    ++p_;
    return n;
  }

  // {% set x = e %}, {% set ns.attr = e %}, or {% set x %} ... {% endset %}
  node_ptr set_statement(expr_parser& ep) {
    auto n = std::make_unique<set_node>();
    n->name = ep.expect_name();
    if (ep.is_op(".")) {
      ep.next();
      n->attr = ep.expect_name();
    }
    if (ep.at_end()) {
      n->block = true;
      n->captured = parse_until({"endset"});
      ++p_;
      return n;
    }
    ep.expect_op("=");
    n->e = ep.expression();
    ep.expect_end();
    return n;
  }

  // {% macro name(a, b=default) %} ... {% endmacro %}
  node_ptr macro_statement(expr_parser& ep, int line) {
    auto n = std::make_unique<macro_node>();
    n->line = line;
    n->name = ep.expect_name();
    ep.expect_op("(");
    while (!ep.is_op(")")) {
      n->params.push_back(ep.expect_name());
      if (ep.is_op("=")) {
        ep.next();
        n->defaults.push_back(ep.expression());
      } else {
        n->defaults.push_back(nullptr);
      }
      if (!ep.is_op(",")) break;
      ep.next();
    }
    ep.expect_op(")");
    ep.expect_end();
    n->macro_body = parse_until({"endmacro"});
    ++p_;
    return n;
  }

  std::vector<segment> s_;
  std::size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

body parse_template(const std::string& source) { return template_parser(split(source)).parse_all(); }

}  // namespace troupe::chat::jinja
