#include "runtime/chat/jinja.h"

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

namespace troupe::chat {

namespace {

// ---------------------------------------------------------------------------------------------
// Values: Python's types as templates see them.

struct value;
using list_t = std::vector<value>;
using dict_t = std::vector<std::pair<std::string, value>>;  // insertion order, like a Python dict

// Values nest no deeper than this: printing, comparing and freeing them recurse once per level.
constexpr int max_value_depth = 256;

[[noreturn]] void fail(const std::string& what);

struct value {
  enum class kind { undefined, none, boolean, integer, real, string, list, dict, ns } k = kind::undefined;
  bool b = false;
  int depth = 0;  // lists and dicts: 1 + the deepest element's depth
  long long i = 0;
  double d = 0;
  std::string s;  // string; for undefined, the name that was looked up
  std::shared_ptr<list_t> l;
  std::shared_ptr<dict_t> m;

  static value none() { value v; v.k = kind::none; return v; }
  static value boolean(bool x) { value v; v.k = kind::boolean; v.b = x; return v; }
  static value integer(long long x) { value v; v.k = kind::integer; v.i = x; return v; }
  static value real(double x) { value v; v.k = kind::real; v.d = x; return v; }
  static value str(std::string x) { value v; v.k = kind::string; v.s = std::move(x); return v; }
  static value undef(std::string name) { value v; v.s = std::move(name); return v; }
  static value list(list_t x = {}) {
    value v;
    v.k = kind::list;
    for (auto& e : x) v.depth = std::max(v.depth, e.depth);
    v.l = std::make_shared<list_t>(std::move(x));
    return v.nest();
  }
  static value dict(dict_t x = {}, kind k = kind::dict) {
    value v;
    v.k = k;
    for (auto& e : x) v.depth = std::max(v.depth, e.second.depth);
    v.m = std::make_shared<dict_t>(std::move(x));
    return v.nest();
  }
  value nest() {
    if (++depth > max_value_depth) fail("values nested deeper than " + std::to_string(max_value_depth) + " levels");
    return std::move(*this);
  }

  bool is(kind x) const { return k == x; }
  bool number() const { return k == kind::integer || k == kind::real || k == kind::boolean; }
  double num() const { return k == kind::real ? d : k == kind::integer ? double(i) : b ? 1.0 : 0.0; }
  const value* find(const std::string& key) const {
    for (auto& [name, v] : *m)
      if (name == key) return &v;
    return nullptr;
  }
};

using kind = value::kind;

[[noreturn]] void fail(const std::string& what) { throw template_error(what); }

// Checks the depth on the way down: building the children first would recurse unbounded.
value from_json(const nlohmann::json& j, int depth = 0) {
  if (depth >= max_value_depth) fail("values nested deeper than " + std::to_string(max_value_depth) + " levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return value::none();
    case nlohmann::json::value_t::boolean: return value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return value::integer(j.get<long long>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();  // past long long: a float, as Python would print it exactly
      return u > std::uint64_t(LLONG_MAX) ? value::real(double(u)) : value::integer((long long)u);
    }
    case nlohmann::json::value_t::number_float: return value::real(j.get<double>());
    case nlohmann::json::value_t::string: return value::str(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      list_t l;
      for (auto& x : j) l.push_back(from_json(x, depth + 1));
      return value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      dict_t m;
      for (auto& [k, x] : j.items()) m.emplace_back(k, from_json(x, depth + 1));
      return value::dict(std::move(m));
    }
    default: return value::none();
  }
}

// --- text helpers: Python's str methods work on code points -------------------------------

std::u32string utf32(const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n && i + std::size_t(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + std::size_t(k)]) & 0x3f);
    out.push_back(cp);
    i += std::size_t(n);
  }
  return out;
}

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xc0 | (c >> 6));
      out += char(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += char(0xe0 | (c >> 12));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    } else {
      out += char(0xf0 | (c >> 18));
      out += char(0x80 | ((c >> 12) & 0x3f));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    }
  }
  return out;
}

bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Python's str.strip / lstrip / rstrip: whitespace, or any of `chars`.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = utf32(s), set = chars ? utf32(*chars) : std::u32string();
  auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_space(c); };
  std::size_t a = 0, b = u.size();
  if (left)
    while (a < b && drop(u[a])) ++a;
  if (right)
    while (b > a && drop(u[b - 1])) --b;
  return utf8(u.substr(a, b - a));
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form, like repr()
  std::string s(buf, r.ptr);
  const auto e = s.find('e');
  if (e != std::string::npos) {  // Python writes 1e+16, 1e-05
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    const bool neg = !ex.empty() && ex[0] == '-';
    if (!ex.empty() && (ex[0] == '-' || ex[0] == '+')) ex = ex.substr(1);
    while (ex.size() < 2) ex = "0" + ex;
    return mant + "e" + (neg ? "-" : "+") + ex;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string py_repr(const value& v);

std::string py_str(const value& v) {
  switch (v.k) {
    case kind::undefined: return "";
    case kind::none: return "None";
    case kind::boolean: return v.b ? "True" : "False";
    case kind::integer: return std::to_string(v.i);
    case kind::real: return py_float(v.d);
    case kind::string: return v.s;
    case kind::ns: return "<Namespace>";
    default: return py_repr(v);
  }
}

std::string py_repr(const value& v) {
  if (v.is(kind::string)) {
    const bool dq = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos;
    const char q = dq ? '"' : '\'';
    std::string out(1, q);
    for (unsigned char c : v.s) {
      if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + char(q);
      else if (c < 0x20 || c == 0x7f) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02x", c);
        out += b;
      } else out += char(c);
    }
    return out + q;
  }
  if (v.is(kind::list)) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.l->size(); ++i) out += (i ? ", " : "") + py_repr((*v.l)[i]);
    return out + "]";
  }
  if (v.is(kind::dict)) {
    std::string out = "{";
    bool first = true;
    for (auto& [k, x] : *v.m) {
      out += (first ? "" : ", ") + py_repr(value::str(k)) + ": " + py_repr(x);
      first = false;
    }
    return out + "}";
  }
  return py_str(v);
}

// json.dumps(x, ensure_ascii=False, indent=indent), as Hugging Face's tojson filter calls it.
void to_json(const value& v, std::optional<int> indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(std::size_t(*indent * d), ' ');
  };
  switch (v.k) {
    case kind::undefined: fail("tojson: the value is undefined (" + v.s + ")");
    case kind::none: out += "null"; return;
    case kind::boolean: out += v.b ? "true" : "false"; return;
    case kind::integer: out += std::to_string(v.i); return;
    case kind::real:
      out += std::isnan(v.d) ? "NaN" : std::isinf(v.d) ? (v.d > 0 ? "Infinity" : "-Infinity") : py_float(v.d);
      return;
    case kind::string: {
      out += '"';
      for (unsigned char c : v.s) {
        switch (c) {
          case '"': out += "\\\""; break;
          case '\\': out += "\\\\"; break;
          case '\n': out += "\\n"; break;
          case '\r': out += "\\r"; break;
          case '\t': out += "\\t"; break;
          case '\b': out += "\\b"; break;
          case '\f': out += "\\f"; break;
          default:
            if (c < 0x20) {
              char b[8];
              std::snprintf(b, sizeof b, "\\u%04x", c);
              out += b;
            } else {
              out += char(c);
            }
        }
      }
      out += '"';
      return;
    }
    case kind::list: {
      if (v.l->empty()) { out += "[]"; return; }
      out += '[';
      for (std::size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += indent ? "," : ", ";
        if (indent) newline(depth + 1);
        to_json((*v.l)[i], indent, depth + 1, out);
      }
      if (indent) newline(depth);
      out += ']';
      return;
    }
    case kind::dict:
    case kind::ns: {
      if (v.m->empty()) { out += "{}"; return; }
      out += '{';
      bool first = true;
      for (auto& [k, x] : *v.m) {
        if (!first) out += indent ? "," : ", ";
        first = false;
        if (indent) newline(depth + 1);
        to_json(value::str(k), indent, depth + 1, out);
        out += ": ";
        to_json(x, indent, depth + 1, out);
      }
      if (indent) newline(depth);
      out += '}';
      return;
    }
  }
}

bool truthy(const value& v) {
  switch (v.k) {
    case kind::undefined:
    case kind::none: return false;
    case kind::boolean: return v.b;
    case kind::integer: return v.i != 0;
    case kind::real: return v.d != 0;
    case kind::string: return !v.s.empty();
    case kind::list: return !v.l->empty();
    case kind::dict:
    case kind::ns: return true;
  }
  return false;
}

const char* type_name(const value& v) {
  switch (v.k) {
    case kind::undefined: return "undefined";
    case kind::none: return "none";
    case kind::boolean: return "bool";
    case kind::integer: return "int";
    case kind::real: return "float";
    case kind::string: return "str";
    case kind::list: return "list";
    case kind::dict: return "dict";
    case kind::ns: return "namespace";
  }
  return "?";
}

void need_defined(const value& v, const char* what) {
  if (v.is(kind::undefined)) fail(std::string(what) + ": '" + v.s + "' is undefined");
}

bool equal(const value& a, const value& b) {
  if (a.number() && b.number()) return a.num() == b.num();
  if (a.k != b.k) return false;
  switch (a.k) {
    case kind::undefined:
    case kind::none: return true;
    case kind::string: return a.s == b.s;
    case kind::list:
      if (a.l->size() != b.l->size()) return false;
      for (std::size_t i = 0; i < a.l->size(); ++i)
        if (!equal((*a.l)[i], (*b.l)[i])) return false;
      return true;
    case kind::dict:
      if (a.m->size() != b.m->size()) return false;
      for (auto& [k, x] : *a.m) {
        const value* y = b.find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    default: return a.m == b.m;
  }
}

int compare(const value& a, const value& b, const std::string& op) {
  if (a.number() && b.number()) return a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
  if (a.is(kind::string) && b.is(kind::string)) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  fail(std::string("'") + op + "' not supported between " + type_name(a) + " and " + type_name(b));
}

std::size_t length(const value& v) {
  switch (v.k) {
    case kind::undefined: return 0;
    case kind::string: return utf32(v.s).size();
    case kind::list: return v.l->size();
    case kind::dict: return v.m->size();
    default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

// The work of filters, methods and builtins is counted against the budget of the render running
// on this thread, as statements and loop iterations are (a `list` or `join` of range(900000) in a
// template inside its step budget took 5.6 s): each item they make, copy or compare is a step,
// each 256 bytes they build one more, and no string they build passes the output limit.
void charge_items(std::size_t n);
void charge_bytes(std::size_t n);  // a string of n bytes has been built
void check_bytes(std::size_t n);   // a string of n bytes is being built: refused past the limit

list_t iterate(const value& v) {
  switch (v.k) {
    case kind::undefined: return {};
    case kind::list:
      charge_items(v.l->size());
      return *v.l;
    case kind::dict: {
      charge_items(v.m->size());
      list_t keys;
      for (auto& [k, x] : *v.m) keys.push_back(value::str(k));
      return keys;
    }
    case kind::string: {
      charge_items(v.s.size());
      list_t chars;
      for (char32_t c : utf32(v.s)) chars.push_back(value::str(utf8(std::u32string(1, c))));
      return chars;
    }
    default: fail(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

bool contains(const value& container, const value& item) {
  if (container.is(kind::string)) {
    if (!item.is(kind::string)) fail("'in <string>' requires a string on the left");
    return container.s.find(item.s) != std::string::npos;
  }
  if (container.is(kind::dict)) return item.is(kind::string) && container.find(item.s);
  for (auto& x : iterate(container))
    if (equal(x, item)) return true;
  return false;
}

// Python's slice semantics on a sequence of n elements.
std::vector<std::size_t> slice_indices(long long n, std::optional<long long> start, std::optional<long long> stop,
                                       std::optional<long long> step) {
  const long long st = step.value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  auto norm = [&](std::optional<long long> x, long long dflt, long long lo, long long hi) {
    if (!x) return dflt;
    long long v = *x < 0 ? *x + n : *x;
    return std::clamp(v, lo, hi);
  };
  std::vector<std::size_t> out;
  if (st > 0) {
    const long long a = norm(start, 0, 0, n), b = norm(stop, n, 0, n);
    for (long long i = a; i < b; i += st) out.push_back(std::size_t(i));
  } else {
    const long long a = norm(start, n - 1, -1, n - 1), b = norm(stop, -1, -1, n - 1);
    for (long long i = a; i > b; i += st) out.push_back(std::size_t(i));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Expression tokens.

struct token {
  enum class type { name, string, integer, real, op, end } t = type::end;
  std::string text;
  long long i = 0;
  double d = 0;
};

std::vector<token> tokenize(const std::string& src, int line) {
  std::vector<token> out;
  std::size_t p = 0;
  auto err = [&](const std::string& what) { fail("line " + std::to_string(line) + ": " + what); };
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) { ++p; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t q = p;
      while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
      out.push_back({token::type::name, src.substr(p, q - p)});
      p = q;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t q = p;
      bool real = false;
      while (q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_' ||
                                (src[q] == '.' && !real && q + 1 < src.size() && std::isdigit(static_cast<unsigned char>(src[q + 1]))))) {
        real |= src[q] == '.';
        ++q;
      }
      if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {  // an exponent: 1e3, 2.5E-4
        std::size_t r = q + 1;
        if (r < src.size() && (src[r] == '+' || src[r] == '-')) ++r;
        if (r < src.size() && std::isdigit(static_cast<unsigned char>(src[r]))) {
          while (r < src.size() && std::isdigit(static_cast<unsigned char>(src[r]))) ++r;
          q = r;
          real = true;
        }
      }
      std::string num = src.substr(p, q - p);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      token t;
      t.t = real ? token::type::real : token::type::integer;
      t.text = num;
      if (real) {
        t.d = std::strtod(num.c_str(), nullptr);  // past double's range: inf, as Python's float() gives
      } else {
        const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), t.i);
        if (ec != std::errc() || end != num.data() + num.size()) err("integer literal " + num + " is out of range");
      }
      out.push_back(t);
      p = q;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string s;
      std::size_t q = p + 1;
      for (; q < src.size() && src[q] != c; ++q) {
        if (src[q] == '\\' && q + 1 < src.size()) {
          const char e = src[++q];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            case '0': s += '\0'; break;
            case 'u':
            case 'x': {
              const std::size_t n = e == 'u' ? 4 : 2;
              if (q + n >= src.size()) err("bad escape in string");
              unsigned code = 0;
              const auto [end, ec] = std::from_chars(src.data() + q + 1, src.data() + q + 1 + n, code, 16);
              if (ec != std::errc() || end != src.data() + q + 1 + n) err("bad escape in string");
              s += utf8(std::u32string(1, char32_t(code)));
              q += n;
              break;
            }
            default: s += '\\'; s += e;
          }
        } else {
          s += src[q];
        }
      }
      if (q >= src.size()) err("unterminated string");
      out.push_back({token::type::string, s});
      p = q + 1;
      continue;
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "(", ")",
                                "[", "]", "{", "}", ",", ".", ":", "|", "="};
    bool found = false;
    for (const char* op : ops) {
      const std::size_t n = std::char_traits<char>::length(op);
      if (src.compare(p, n, op) == 0) {
        out.push_back({token::type::op, op});
        p += n;
        found = true;
        break;
      }
    }
    if (!found) err(std::string("unexpected character '") + c + "'");
  }
  out.push_back({token::type::end, ""});
  return out;
}

// ---------------------------------------------------------------------------------------------
// Evaluation context.

struct loop_break {};
struct loop_continue {};

struct context {
  std::vector<std::map<std::string, value>> scopes;
  render_limits limits;
  std::size_t steps = 0;

  void charge(std::size_t n) {
    steps += n;
    if (steps > limits.max_steps)
      fail("the template ran past its budget of " + std::to_string(limits.max_steps) + " steps");
  }
  // A string about to be built: counted against the budget, refused past the output limit.
  void building(std::size_t bytes, int line) {
    if (bytes > limits.max_output)
      fail("line " + std::to_string(line) + ": a string of " + std::to_string(bytes) + " bytes is past the limit of " +
           std::to_string(limits.max_output));
    charge(bytes / 256);
  }
  value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return value::undef(name);
  }
  void set(const std::string& name, value v) { scopes.back()[name] = std::move(v); }
};

thread_local context* rendering = nullptr;  // the render running on this thread, for its budget

void charge_items(std::size_t n) {
  if (rendering) rendering->charge(n);
}
void charge_bytes(std::size_t n) {
  if (rendering) rendering->charge(n / 256);
}
void check_bytes(std::size_t n) {
  if (rendering && n > rendering->limits.max_output)
    fail("a string of more than " + std::to_string(rendering->limits.max_output) + " bytes is past the limit");
}

struct expr {
  int line = 0;
  virtual ~expr() = default;
  virtual value eval(context& c) const = 0;
};
using expr_ptr = std::unique_ptr<expr>;

struct literal : expr {
  value v;
  value eval(context&) const override { return v; }
};
struct name_ref : expr {
  std::string name;
  value eval(context& c) const override { return c.lookup(name); }
};
struct list_lit : expr {
  std::vector<expr_ptr> items;
  value eval(context& c) const override {
    list_t l;
    for (auto& e : items) l.push_back(e->eval(c));
    return value::list(std::move(l));
  }
};
struct dict_lit : expr {
  std::vector<std::pair<expr_ptr, expr_ptr>> items;
  value eval(context& c) const override {
    dict_t m;
    for (auto& [k, v] : items) {
      value key = k->eval(c);
      if (!key.is(kind::string)) fail("line " + std::to_string(line) + ": dict keys must be strings here");
      m.emplace_back(key.s, v->eval(c));
    }
    return value::dict(std::move(m));
  }
};

value get_item(const value& obj, const value& key, int line) {
  auto where = [&] { return "line " + std::to_string(line) + ": "; };
  if (obj.is(kind::undefined)) fail(where() + "'" + obj.s + "' is undefined");
  if (obj.is(kind::dict) || obj.is(kind::ns)) {
    if (!key.is(kind::string)) return value::undef(py_str(key));
    const value* v = obj.find(key.s);
    return v ? *v : value::undef(key.s);
  }
  if (obj.is(kind::list) || obj.is(kind::string)) {
    if (!key.is(kind::integer)) {
      if (key.is(kind::string)) return value::undef(key.s);  // a list has no attribute of that name
      fail(where() + "indices must be integers");
    }
    const long long n = obj.is(kind::list) ? (long long)obj.l->size() : (long long)utf32(obj.s).size();
    const long long i = key.i < 0 ? key.i + n : key.i;
    if (i < 0 || i >= n) fail(where() + "index " + std::to_string(key.i) + " out of range");
    if (obj.is(kind::list)) return (*obj.l)[std::size_t(i)];
    return value::str(utf8(std::u32string(1, utf32(obj.s)[std::size_t(i)])));
  }
  return value::undef(py_str(key));
}

struct getattr_expr : expr {
  expr_ptr obj;
  std::string attr;
  value eval(context& c) const override { return get_item(obj->eval(c), value::str(attr), line); }
};
struct getitem_expr : expr {
  expr_ptr obj, key;
  value eval(context& c) const override { return get_item(obj->eval(c), key->eval(c), line); }
};
struct slice_expr : expr {
  expr_ptr obj, start, stop, step;
  value eval(context& c) const override {
    value o = obj->eval(c);
    auto opt = [&](const expr_ptr& e) -> std::optional<long long> {
      if (!e) return std::nullopt;
      value v = e->eval(c);
      if (v.is(kind::none)) return std::nullopt;
      if (!v.is(kind::integer)) fail("line " + std::to_string(line) + ": slice indices must be integers");
      return v.i;
    };
    const auto a = opt(start), b = opt(stop), s = opt(step);
    if (o.is(kind::list)) {
      list_t out;
      for (auto i : slice_indices((long long)o.l->size(), a, b, s)) out.push_back((*o.l)[i]);
      return value::list(std::move(out));
    }
    if (o.is(kind::string)) {
      const std::u32string u = utf32(o.s);
      std::u32string out;
      for (auto i : slice_indices((long long)u.size(), a, b, s)) out += u[i];
      return value::str(utf8(out));
    }
    need_defined(o, "slice");
    fail("line " + std::to_string(line) + ": cannot slice a " + type_name(o));
  }
};

struct call_args {
  std::vector<value> pos;
  std::vector<std::pair<std::string, value>> kw;
  const value* kwarg(const std::string& k) const {
    for (auto& [n, v] : kw)
      if (n == k) return &v;
    return nullptr;
  }
  // Positional i, else keyword `k`, else null.
  const value* arg(std::size_t i, const std::string& k) const { return i < pos.size() ? &pos[i] : kwarg(k); }
};

bool run_test(const std::string& name, const value& v, const call_args& a, int line);

value apply_filter(const std::string& name, const value& v, const call_args& a, int line);

value call_method(const value& obj, const std::string& name, const call_args& a, int line) {
  auto where = [&] { return "line " + std::to_string(line) + ": "; };
  auto str_arg = [&](std::size_t i, const std::string& k) -> std::optional<std::string> {
    const value* v = a.arg(i, k);
    if (!v || v->is(kind::none)) return std::nullopt;
    if (!v->is(kind::string)) fail(where() + name + "() takes a string");
    return v->s;
  };
  if (obj.is(kind::string)) {
    const std::string& s = obj.s;
    if (name == "strip") return value::str(py_strip(s, str_arg(0, "chars"), true, true));
    if (name == "lstrip") return value::str(py_strip(s, str_arg(0, "chars"), true, false));
    if (name == "rstrip") return value::str(py_strip(s, str_arg(0, "chars"), false, true));
    if (name == "upper" || name == "lower") {
      std::string r = s;
      for (auto& ch : r) ch = char(name == "upper" ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
      return value::str(r);
    }
    if (name == "startswith" || name == "endswith") {
      const value* p = a.arg(0, "prefix");
      if (!p) fail(where() + name + "() needs an argument");
      list_t options = p->is(kind::list) ? *p->l : list_t{*p};
      for (auto& o : options) {
        if (!o.is(kind::string)) fail(where() + name + "() takes strings");
        const bool hit = name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0
                                              : s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0;
        if (hit) return value::boolean(true);
      }
      return value::boolean(false);
    }
    if (name == "split" || name == "rsplit") {
      const auto sep = str_arg(0, "sep");
      const value* mx = a.arg(1, "maxsplit");
      long long maxsplit = mx && mx->is(kind::integer) ? mx->i : -1;
      list_t parts;
      if (!sep) {
        const std::u32string u = utf32(s);
        std::size_t i = 0;
        while (true) {
          while (i < u.size() && py_space(u[i])) ++i;
          if (i >= u.size()) break;
          if (maxsplit >= 0 && (long long)parts.size() == maxsplit) {
            std::size_t e = u.size();
            while (e > i && py_space(u[e - 1])) --e;
            parts.push_back(value::str(utf8(u.substr(i, e - i))));
            break;
          }
          std::size_t j = i;
          while (j < u.size() && !py_space(u[j])) ++j;
          parts.push_back(value::str(utf8(u.substr(i, j - i))));
          i = j;
        }
        charge_items(parts.size());
        return value::list(std::move(parts));
      }
      if (sep->empty()) fail(where() + "empty separator");
      if (name == "rsplit" && maxsplit >= 0) {
        std::vector<std::string> rev;
        std::size_t end = s.size();
        while ((long long)rev.size() < maxsplit) {
          const std::size_t at = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : std::string::npos;
          if (at == std::string::npos) break;
          rev.push_back(s.substr(at + sep->size(), end - at - sep->size()));
          end = at;
        }
        parts.push_back(value::str(s.substr(0, end)));
        for (auto it = rev.rbegin(); it != rev.rend(); ++it) parts.push_back(value::str(*it));
        return value::list(std::move(parts));
      }
      std::size_t from = 0;
      while (true) {
        const std::size_t at = (maxsplit >= 0 && (long long)parts.size() == maxsplit) ? std::string::npos : s.find(*sep, from);
        if (at == std::string::npos) {
          parts.push_back(value::str(s.substr(from)));
          break;
        }
        parts.push_back(value::str(s.substr(from, at - from)));
        from = at + sep->size();
      }
      charge_items(parts.size());
      return value::list(std::move(parts));
    }
    if (name == "replace") {
      const auto from = str_arg(0, "old"), to = str_arg(1, "new");
      if (!from || !to) fail(where() + "replace() takes two strings");
      const value* cnt = a.arg(2, "count");
      long long left = cnt && cnt->is(kind::integer) ? cnt->i : -1;
      std::string r;
      std::size_t p = 0;
      if (from->empty()) fail(where() + "replace() of an empty string is not supported");
      while (left != 0) {
        const std::size_t at = s.find(*from, p);
        if (at == std::string::npos) break;
        r += s.substr(p, at - p) + *to;
        check_bytes(r.size());
        p = at + from->size();
        if (left > 0) --left;
      }
      charge_bytes(r.size() + s.size() - p);
      return value::str(r + s.substr(p));
    }
    if (name == "title" || name == "capitalize") {
      std::string r = s;
      bool start = true;
      for (auto& ch : r) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(ch));
        if (name == "title") {
          ch = char(start ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
          start = !alpha;
        } else {
          ch = char(start ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
          start = false;
        }
      }
      return value::str(r);
    }
    if (name == "find") {
      const auto sub = str_arg(0, "sub");
      if (!sub) fail(where() + "find() takes a string");
      const auto at = s.find(*sub);
      return value::integer(at == std::string::npos ? -1 : (long long)utf32(s.substr(0, at)).size());
    }
    if (name == "join") {
      const value* items = a.arg(0, "iterable");
      if (!items) fail(where() + "join() needs an argument");
      std::string r;
      bool first = true;
      for (auto& x : iterate(*items)) {
        if (!x.is(kind::string)) fail(where() + "join() takes strings");
        r += (first ? "" : s) + x.s;
        check_bytes(r.size());
        first = false;
      }
      charge_bytes(r.size());
      return value::str(r);
    }
    if (name == "count") {
      const auto sub = str_arg(0, "sub");
      if (!sub || sub->empty()) fail(where() + "count() takes a non-empty string");
      long long n = 0;
      for (std::size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
      return value::integer(n);
    }
  }
  if (obj.is(kind::dict)) {
    if (name == "items") {
      charge_items(obj.m->size());
      list_t l;
      for (auto& [k, x] : *obj.m) l.push_back(value::list({value::str(k), x}));
      return value::list(std::move(l));
    }
    if (name == "keys" || name == "values") {
      charge_items(obj.m->size());
      list_t l;
      for (auto& [k, x] : *obj.m) l.push_back(name == "keys" ? value::str(k) : x);
      return value::list(std::move(l));
    }
    if (name == "get") {
      const value* k = a.arg(0, "key");
      if (!k || !k->is(kind::string)) fail(where() + "get() takes a string key");
      const value* v = obj.find(k->s);
      if (v) return *v;
      const value* d = a.arg(1, "default");
      return d ? *d : value::none();
    }
  }
  need_defined(obj, ("line " + std::to_string(line) + ": ." + name + "()").c_str());
  fail(where() + "'" + type_name(obj) + "' object has no method '" + name + "'");
}

struct call_expr : expr {
  expr_ptr callee;  // a name_ref (a global function) or a getattr_expr (a method)
  std::vector<expr_ptr> pos;
  std::vector<std::pair<std::string, expr_ptr>> kw;

  call_args args(context& c) const {
    call_args a;
    for (auto& e : pos) a.pos.push_back(e->eval(c));
    for (auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(c));
    return a;
  }

  value eval(context& c) const override {
    const std::string where = "line " + std::to_string(line) + ": ";
    if (auto* m = dynamic_cast<const getattr_expr*>(callee.get())) return call_method(m->obj->eval(c), m->attr, args(c), line);
    auto* n = dynamic_cast<const name_ref*>(callee.get());
    if (!n) fail(where + "only functions and methods can be called");
    const call_args a = args(c);
    if (n->name == "raise_exception") throw template_raised(a.pos.empty() ? "raise_exception" : py_str(a.pos[0]));
    if (n->name == "namespace" || n->name == "dict") {
      dict_t m;
      for (auto& [k, v] : a.kw) m.emplace_back(k, v);
      return value::dict(std::move(m), n->name == "namespace" ? kind::ns : kind::dict);
    }
    if (n->name == "range") {
      long long start = 0, stop = 0, step = 1;
      for (auto& v : a.pos)
        if (!v.is(kind::integer)) fail(where + "range() takes integers");
      if (a.pos.size() == 1) stop = a.pos[0].i;
      else if (a.pos.size() >= 2) { start = a.pos[0].i; stop = a.pos[1].i; }
      if (a.pos.size() == 3) step = a.pos[2].i;
      if (step == 0 || a.pos.empty() || a.pos.size() > 3) fail(where + "bad range()");
      const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
      const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
      c.charge(count > __int128(c.limits.max_steps) ? c.limits.max_steps + 1 : std::size_t(count));
      list_t l;
      for (long long i = start; step > 0 ? i < stop : i > stop; i += step) l.push_back(value::integer(i));
      return value::list(std::move(l));
    }
    if (n->name == "strftime_now") {
      if (a.pos.empty() || !a.pos[0].is(kind::string)) fail(where + "strftime_now() takes a format string");
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      char buf[256];
      const std::size_t len = std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm);
      return value::str(std::string(buf, len));
    }
    fail(where + "unknown function '" + n->name + "'");
  }
};

struct filter_expr : expr {
  expr_ptr obj;
  std::string name;
  std::vector<expr_ptr> pos;
  std::vector<std::pair<std::string, expr_ptr>> kw;
  value eval(context& c) const override {
    call_args a;
    for (auto& e : pos) a.pos.push_back(e->eval(c));
    for (auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(c));
    return apply_filter(name, obj->eval(c), a, line);
  }
};

struct test_expr : expr {
  expr_ptr obj;
  std::string name;
  bool negated = false;
  std::vector<expr_ptr> pos;
  value eval(context& c) const override {
    call_args a;
    for (auto& e : pos) a.pos.push_back(e->eval(c));
    return value::boolean(run_test(name, obj->eval(c), a, line) != negated);
  }
};

struct unary_expr : expr {
  std::string op;
  expr_ptr x;
  value eval(context& c) const override {
    value v = x->eval(c);
    if (op == "not") return value::boolean(!truthy(v));
    if (v.is(kind::integer)) return value::integer(op == "-" ? -v.i : v.i);
    if (v.is(kind::real)) return value::real(op == "-" ? -v.d : v.d);
    need_defined(v, "unary operator");
    fail("line " + std::to_string(line) + ": bad operand for unary " + op + ": " + type_name(v));
  }
};

struct binary_expr : expr {
  std::string op;
  expr_ptr a, b;
  value eval(context& c) const override {
    const std::string where = "line " + std::to_string(line) + ": ";
    if (op == "and") {
      value x = a->eval(c);
      return truthy(x) ? b->eval(c) : x;
    }
    if (op == "or") {
      value x = a->eval(c);
      return truthy(x) ? x : b->eval(c);
    }
    const value x = a->eval(c), y = b->eval(c);
    if (op == "~") {
      std::string sx = py_str(x), sy = py_str(y);
      c.building(sx.size() + sy.size(), line);
      return value::str(std::move(sx) + sy);
    }
    if (op == "==") return value::boolean(equal(x, y));
    if (op == "!=") return value::boolean(!equal(x, y));
    if (op == "<") return value::boolean(compare(x, y, op) < 0);
    if (op == ">") return value::boolean(compare(x, y, op) > 0);
    if (op == "<=") return value::boolean(compare(x, y, op) <= 0);
    if (op == ">=") return value::boolean(compare(x, y, op) >= 0);
    if (op == "in") return value::boolean(contains(y, x));
    if (op == "not in") return value::boolean(!contains(y, x));
    need_defined(x, ("line " + std::to_string(line) + ": operator " + op).c_str());
    need_defined(y, ("line " + std::to_string(line) + ": operator " + op).c_str());
    if (op == "+") {
      if (x.is(kind::string) && y.is(kind::string)) {
        c.building(x.s.size() + y.s.size(), line);
        return value::str(x.s + y.s);
      }
      if (x.is(kind::list) && y.is(kind::list)) {
        c.charge(x.l->size() + y.l->size());
        list_t l = *x.l;
        l.insert(l.end(), y.l->begin(), y.l->end());
        return value::list(std::move(l));
      }
    }
    if (op == "*" && x.is(kind::string) && y.is(kind::integer)) {
      if (y.i > 0 && !x.s.empty()) c.building(y.i > (long long)(c.limits.max_output / x.s.size()) ? c.limits.max_output + 1 : x.s.size() * std::size_t(y.i), line);
      std::string r;
      for (long long i = 0; i < y.i; ++i) r += x.s;
      return value::str(r);
    }
    if (!x.number() || !y.number())
      fail(where + "unsupported operand types for " + op + ": " + type_name(x) + " and " + type_name(y));
    const bool ints = !x.is(kind::real) && !y.is(kind::real);
    const long long xi = x.is(kind::boolean) ? x.b : x.i, yi = y.is(kind::boolean) ? y.b : y.i;
    long long r = 0;
    auto overflow = [&] { fail(where + "integer overflow in " + op); };
    if (op == "+") return ints ? (__builtin_add_overflow(xi, yi, &r) ? overflow() : void(), value::integer(r)) : value::real(x.num() + y.num());
    if (op == "-") return ints ? (__builtin_sub_overflow(xi, yi, &r) ? overflow() : void(), value::integer(r)) : value::real(x.num() - y.num());
    if (op == "*") return ints ? (__builtin_mul_overflow(xi, yi, &r) ? overflow() : void(), value::integer(r)) : value::real(x.num() * y.num());
    if (op == "**") {
      if (!ints || yi < 0) return value::real(std::pow(x.num(), y.num()));
      const double p = std::pow(double(xi), double(yi));
      if (!(std::fabs(p) < 9.2e18)) overflow();
      return value::integer((long long)std::llround(p));
    }
    if (y.num() == 0) fail(where + "division by zero");
    if (ints && xi == LLONG_MIN && yi == -1) overflow();
    if (op == "/") return value::real(x.num() / y.num());
    if (op == "//") {
      if (ints) {
        long long q = xi / yi;
        if ((xi % yi != 0) && ((xi < 0) != (yi < 0))) --q;
        return value::integer(q);
      }
      return value::real(std::floor(x.num() / y.num()));
    }
    if (op == "%") {
      if (ints) {
        long long r = xi % yi;
        if (r != 0 && ((r < 0) != (yi < 0))) r += yi;
        return value::integer(r);
      }
      double r = std::fmod(x.num(), y.num());
      if (r != 0 && ((r < 0) != (y.num() < 0))) r += y.num();
      return value::real(r);
    }
    fail(where + "unknown operator " + op);
  }
};

struct cond_expr : expr {
  expr_ptr cond, then, otherwise;
  value eval(context& c) const override {
    if (truthy(cond->eval(c))) return then->eval(c);
    return otherwise ? otherwise->eval(c) : value::undef("conditional expression without else");
  }
};

bool run_test(const std::string& name, const value& v, const call_args& a, int line) {
  auto arg = [&]() -> const value& {
    if (a.pos.empty()) fail("line " + std::to_string(line) + ": test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is(kind::undefined);
  if (name == "undefined") return v.is(kind::undefined);
  if (name == "none") return v.is(kind::none);
  if (name == "string") return v.is(kind::string);
  if (name == "mapping") return v.is(kind::dict);
  if (name == "sequence") return v.is(kind::list) || v.is(kind::string) || v.is(kind::dict);
  if (name == "iterable") return v.is(kind::list) || v.is(kind::string) || v.is(kind::dict);
  if (name == "number") return v.is(kind::integer) || v.is(kind::real);
  if (name == "integer") return v.is(kind::integer);
  if (name == "float") return v.is(kind::real);
  if (name == "boolean") return v.is(kind::boolean);
  if (name == "true") return v.is(kind::boolean) && v.b;
  if (name == "false") return v.is(kind::boolean) && !v.b;
  if (name == "odd" || name == "even") {
    if (!v.is(kind::integer)) fail("line " + std::to_string(line) + ": test '" + name + "' needs an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "in") return contains(arg(), v);
  if (name == "divisibleby") return v.is(kind::integer) && arg().is(kind::integer) && arg().i != 0 && v.i % arg().i == 0;
  fail("line " + std::to_string(line) + ": unknown test '" + name + "'");
}

value apply_filter(const std::string& name, const value& v, const call_args& a, int line) {
  const std::string where = "line " + std::to_string(line) + ": ";
  if (name == "trim") {
    const value* chars = a.arg(0, "chars");
    return value::str(py_strip(py_str(v), chars && chars->is(kind::string) ? std::optional<std::string>(chars->s) : std::nullopt, true, true));
  }
  if (name == "length" || name == "count") return value::integer((long long)length(v));
  if (name == "string") return value::str(py_str(v));
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") return call_method(value::str(py_str(v)), name, {}, line);
  if (name == "replace") return call_method(value::str(py_str(v)), name, a, line);
  if (name == "tojson") {
    std::optional<int> indent;
    if (const value* i = a.arg(0, "indent"); i && i->is(kind::integer)) indent = int(i->i);
    std::string out;
    to_json(v, indent, 0, out);
    return value::str(out);
  }
  if (name == "default" || name == "d") {
    const value* dflt = a.arg(0, "default_value");
    const value* boolean = a.arg(1, "boolean");
    const bool use = v.is(kind::undefined) || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (dflt ? *dflt : value::str("")) : v;
  }
  if (name == "list") return value::list(iterate(v));
  if (name == "first" || name == "last") {
    list_t l = iterate(v);
    if (l.empty()) return value::undef("first of an empty sequence");
    return name == "first" ? l.front() : l.back();
  }
  if (name == "reverse") {
    if (v.is(kind::string)) {
      std::u32string u = utf32(v.s);
      std::reverse(u.begin(), u.end());
      return value::str(utf8(u));
    }
    list_t l = iterate(v);
    std::reverse(l.begin(), l.end());
    return value::list(std::move(l));
  }
  if (name == "join") {
    const value* sep = a.arg(0, "d");
    const value* attr = a.arg(1, "attribute");
    std::string out;
    bool first = true;
    for (auto& x : iterate(v)) {
      const value item = attr ? get_item(x, *attr, line) : x;
      out += (first ? "" : (sep ? py_str(*sep) : "")) + py_str(item);
      check_bytes(out.size());
      first = false;
    }
    charge_bytes(out.size());
    return value::str(out);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "selectattr" || name == "select";
    std::size_t i = 0;
    std::string attr_name;
    if (attr) {
      if (a.pos.empty() || !a.pos[0].is(kind::string)) fail(where + name + " needs an attribute name");
      attr_name = a.pos[0].s;
      i = 1;
    }
    std::optional<std::string> test;
    if (a.pos.size() > i) {
      if (!a.pos[i].is(kind::string)) fail(where + name + ": the test name must be a string");
      test = a.pos[i].s;
    }
    call_args targs;
    targs.pos.assign(a.pos.begin() + long(std::min(a.pos.size(), i + 1)), a.pos.end());
    list_t out;
    for (auto& x : iterate(v)) {
      const value item = attr ? get_item(x, value::str(attr_name), line) : x;
      const bool pass = test ? run_test(*test, item, targs, line) : truthy(item);
      if (pass == keep) out.push_back(x);
    }
    return value::list(std::move(out));
  }
  if (name == "map") {
    const value* attr = a.kwarg("attribute");
    list_t out;
    if (attr) {
      for (auto& x : iterate(v)) out.push_back(get_item(x, *attr, line));
    } else if (!a.pos.empty() && a.pos[0].is(kind::string)) {
      call_args rest;
      rest.pos.assign(a.pos.begin() + 1, a.pos.end());
      for (auto& x : iterate(v)) out.push_back(apply_filter(a.pos[0].s, x, rest, line));
    } else {
      fail(where + "map needs attribute= or a filter name");
    }
    return value::list(std::move(out));
  }
  if (name == "items") return call_method(v, "items", {}, line);
  if (name == "int") {
    if (v.is(kind::integer)) return v;
    if (v.is(kind::real)) return value::integer((long long)v.d);
    if (v.is(kind::string)) {
      try {
        return value::integer(std::stoll(v.s));
      } catch (const std::exception&) {
        return value::integer(0);
      }
    }
    return value::integer(0);
  }
  if (name == "float") return value::real(v.number() ? v.num() : v.is(kind::string) ? std::atof(v.s.c_str()) : 0.0);
  if (name == "abs") {
    if (v.is(kind::integer)) return value::integer(v.i < 0 ? -v.i : v.i);
    return value::real(std::fabs(v.num()));
  }
  if (name == "unique") {
    list_t out;
    for (auto& x : iterate(v)) {
      charge_items(out.size());  // the comparisons this item costs
      if (std::none_of(out.begin(), out.end(), [&](const value& y) { return equal(x, y); })) out.push_back(x);
    }
    return value::list(std::move(out));
  }
  fail(where + "unknown filter '" + name + "'");
}

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
                   t->name != "defined" && t->name != "undefined" && t->name != "none" && t->name != "string") {
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

// ---------------------------------------------------------------------------------------------
// Template structure.

struct node {
  virtual ~node() = default;
  virtual void render(context& c, std::string& out) const = 0;
};
using node_ptr = std::unique_ptr<node>;
using body = std::vector<node_ptr>;

void render_body(const body& b, context& c, std::string& out) {
  for (auto& n : b) {
    c.charge(1);
    n->render(c, out);
    if (out.size() > c.limits.max_output)
      fail("the template's output passed the limit of " + std::to_string(c.limits.max_output) + " bytes");
  }
}

struct text_node : node {
  std::string text;
  void render(context&, std::string& out) const override { out += text; }
};
struct output_node : node {
  expr_ptr e;
  void render(context& c, std::string& out) const override { out += py_str(e->eval(c)); }
};
struct if_node : node {
  std::vector<std::pair<expr_ptr, body>> branches;
  body otherwise;
  void render(context& c, std::string& out) const override {
    for (auto& [cond, b] : branches)
      if (truthy(cond->eval(c))) return render_body(b, c, out);
    render_body(otherwise, c, out);
  }
};
struct for_node : node {
  std::vector<std::string> vars;
  expr_ptr iter, filter;
  body loop_body, otherwise;
  void render(context& c, std::string& out) const override {
    list_t items = iterate(iter->eval(c));
    if (filter) {
      list_t kept;
      for (auto& x : items) {
        c.scopes.emplace_back();
        bind(c, x);
        if (truthy(filter->eval(c))) kept.push_back(x);
        c.scopes.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) return render_body(otherwise, c, out);
    const long long n = (long long)items.size();
    for (long long i = 0; i < n; ++i) {
      c.charge(1);
      c.scopes.emplace_back();  // a loop body's `set` does not leak out (hence namespace())
      bind(c, items[std::size_t(i)]);
      dict_t loop{{"index", value::integer(i + 1)},      {"index0", value::integer(i)},
                  {"revindex", value::integer(n - i)},   {"revindex0", value::integer(n - i - 1)},
                  {"first", value::boolean(i == 0)},     {"last", value::boolean(i == n - 1)},
                  {"length", value::integer(n)},
                  {"previtem", i > 0 ? items[std::size_t(i - 1)] : value::undef("loop.previtem")},
                  {"nextitem", i + 1 < n ? items[std::size_t(i + 1)] : value::undef("loop.nextitem")}};
      c.set("loop", value::dict(std::move(loop)));
      bool stop = false;
      try {
        render_body(loop_body, c, out);
      } catch (const loop_continue&) {
      } catch (const loop_break&) {
        stop = true;
      }
      c.scopes.pop_back();
      if (stop) break;
    }
  }
  void bind(context& c, const value& x) const {
    if (vars.size() == 1) return c.set(vars[0], x);
    list_t parts = iterate(x);
    if (parts.size() != vars.size()) fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(vars.size()));
    for (std::size_t i = 0; i < vars.size(); ++i) c.set(vars[i], parts[i]);
  }
};
bool holds_namespace(const value& v) {
  if (v.is(kind::ns)) return true;
  if (v.is(kind::list))
    for (auto& x : *v.l)
      if (holds_namespace(x)) return true;
  if (v.is(kind::dict))
    for (auto& [k, x] : *v.m)
      if (holds_namespace(x)) return true;
  return false;
}

struct set_node : node {
  std::string name, attr;  // attr set: namespace attribute assignment
  expr_ptr e;
  body captured;  // {% set x %}...{% endset %}
  bool block = false;
  void render(context& c, std::string&) const override {
    value v;
    if (block) {
      std::string s;
      render_body(captured, c, s);
      v = value::str(s);
    } else {
      v = e->eval(c);
    }
    if (attr.empty()) return c.set(name, std::move(v));
    value ns = c.lookup(name);
    if (!ns.is(kind::ns)) fail("cannot set '" + attr + "' on '" + name + "': not a namespace");
    // Namespaces are the one mutable value: one stored in a namespace could hold itself.
    if (holds_namespace(v)) fail("cannot store a namespace in namespace '" + name + "'");
    for (auto& [k, x] : *ns.m)
      if (k == attr) {
        x = std::move(v);
        return;
      }
    ns.m->emplace_back(attr, std::move(v));
  }
};
struct break_node : node {
  bool is_break = true;
  void render(context&, std::string&) const override {
    if (is_break) throw loop_break{};
    throw loop_continue{};
  }
};

// A template split into text and tags, with Jinja's whitespace control applied.
struct segment {
  enum class type { text, var, block } t;
  std::string content;
  int line = 1;
};

std::vector<segment> split(std::string src) {
  // Jinja normalizes newlines and drops one trailing newline (keep_trailing_newline=False).
  std::string norm;
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      norm += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      norm += src[i];
    }
  }
  src = std::move(norm);
  if (!src.empty() && src.back() == '\n') src.pop_back();

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

    // The tag's end, outside string literals (comments: the first #}).
    const std::string close = kind_c == '{' ? "}}" : kind_c == '%' ? "%}" : "#}";
    std::size_t end = std::string::npos;
    if (kind_c == '#') {
      end = src.find("#}", inner);
    } else {
      char quote = 0;
      for (std::size_t q = inner; q + 1 < src.size(); ++q) {
        if (quote) {
          if (src[q] == '\\') ++q;
          else if (src[q] == quote) quote = 0;
          continue;
        }
        if (src[q] == '\'' || src[q] == '"') { quote = src[q]; continue; }
        if (src.compare(q, 2, close) == 0) { end = q; break; }
      }
    }
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
    if (kw == "if") {
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
    if (kw == "for") {
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
    if (kw == "set") {
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
    if (kw == "break" || kw == "continue") {
      auto n = std::make_unique<break_node>();
      n->is_break = kw == "break";
      ep.expect_end();
      return n;
    }
    ep.err("unknown or unsupported statement '" + kw + "'");
  }

  std::vector<segment> s_;
  std::size_t p_ = 0;
  int depth_ = 0;
};

}  // namespace

struct jinja_template::impl {
  body root;
};

jinja_template::jinja_template(const std::string& source) {
  auto p = std::make_shared<impl>();
  p->root = template_parser(split(source)).parse_all();
  p_ = std::move(p);
}
jinja_template::~jinja_template() = default;
jinja_template::jinja_template(const jinja_template&) = default;
jinja_template& jinja_template::operator=(const jinja_template&) = default;

std::string jinja_template::render(const nlohmann::json& ctx, const render_limits& limits) const {
  context c;
  c.limits = limits;
  struct on_this_thread {  // filters and methods charge this render's budget
    context* before;
    explicit on_this_thread(context* c) : before(rendering) { rendering = c; }
    ~on_this_thread() { rendering = before; }
  } meter(&c);
  c.scopes.emplace_back();
  if (ctx.is_object())
    for (auto& [k, v] : ctx.items()) c.scopes.back()[k] = from_json(v);
  c.scopes.emplace_back();  // the template's own `set`s
  std::string out;
  try {
    render_body(p_->root, c, out);
  } catch (const loop_break&) {
    throw template_error("'break' outside a loop");
  } catch (const loop_continue&) {
    throw template_error("'continue' outside a loop");
  }
  return out;
}

}  // namespace troupe::chat
