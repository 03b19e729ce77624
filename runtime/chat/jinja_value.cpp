#include "runtime/chat/jinja_value.h"

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

namespace troupe::chat::jinja {

[[noreturn]] void fail(const std::string& what) { throw template_error(what); }

// Checks the depth on the way down: building the children first would recurse unbounded.
value from_json(const nlohmann::json& j, int depth) {
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
    case kind::function: return "<function " + v.s + ">";
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
    case kind::function: fail("tojson: Object of type function is not JSON serializable");
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
    case kind::ns:
    case kind::function: return true;
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
    case kind::function: return "function";
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
    case kind::string:
    case kind::function: return a.s == b.s && a.macro == b.macro;
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

}  // namespace troupe::chat::jinja
