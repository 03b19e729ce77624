// The Jinja subset's builtins: the str, dict and list methods chat templates call, the `is`
// tests and the filters, each as Python and Jinja define them.
#include "runtime/chat/jinja_eval.h"

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

namespace {

// One method call: its name and arguments, and how its errors name its line.
struct method_call {
  const std::string& name;
  const call_args& a;
  int line;
  std::string where() const { return "line " + std::to_string(line) + ": "; }
  // Argument i (or keyword k) as a string; none when absent or None.
  std::optional<std::string> str_arg(std::size_t i, const std::string& k) const {
    const value* v = a.arg(i, k);
    if (!v || v->is(kind::none)) return std::nullopt;
    if (!v->is(kind::string)) fail(where() + name + "() takes a string");
    return v->s;
  }
};

// str.split and str.rsplit: on whitespace runs without a separator, with maxsplit.
value str_split(const method_call& m, const std::string& s) {
  const auto sep = m.str_arg(0, "sep");
  const value* mx = m.a.arg(1, "maxsplit");
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
  if (sep->empty()) fail(m.where() + "empty separator");
  if (m.name == "rsplit" && maxsplit >= 0) {
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

// str.replace(old, new[, count]).
value str_replace(const method_call& m, const std::string& s) {
  const auto from = m.str_arg(0, "old"), to = m.str_arg(1, "new");
  if (!from || !to) fail(m.where() + "replace() takes two strings");
  const value* cnt = m.a.arg(2, "count");
  long long left = cnt && cnt->is(kind::integer) ? cnt->i : -1;
  std::string r;
  std::size_t p = 0;
  if (from->empty()) fail(m.where() + "replace() of an empty string is not supported");
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

// str.title and str.capitalize (ASCII letters, as the templates' uses need).
value str_title(const std::string& name, const std::string& s) {
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

std::optional<value> str_method(const method_call& m, const std::string& s) {
  if (m.name == "strip") return value::str(py_strip(s, m.str_arg(0, "chars"), true, true));
  if (m.name == "lstrip") return value::str(py_strip(s, m.str_arg(0, "chars"), true, false));
  if (m.name == "rstrip") return value::str(py_strip(s, m.str_arg(0, "chars"), false, true));
  if (m.name == "upper" || m.name == "lower") {
    std::string r = s;
    for (auto& ch : r) ch = char(m.name == "upper" ? std::toupper(static_cast<unsigned char>(ch)) : std::tolower(static_cast<unsigned char>(ch)));
    return value::str(r);
  }
  if (m.name == "startswith" || m.name == "endswith") {
    const value* p = m.a.arg(0, "prefix");
    if (!p) fail(m.where() + m.name + "() needs an argument");
    list_t options = p->is(kind::list) ? *p->l : list_t{*p};
    for (auto& o : options) {
      if (!o.is(kind::string)) fail(m.where() + m.name + "() takes strings");
      const bool hit = m.name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0
                                            : s.size() >= o.s.size() && s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0;
      if (hit) return value::boolean(true);
    }
    return value::boolean(false);
  }
  if (m.name == "split" || m.name == "rsplit") return str_split(m, s);
  if (m.name == "replace") return str_replace(m, s);
  if (m.name == "title" || m.name == "capitalize") return str_title(m.name, s);
  if (m.name == "find") {
    const auto sub = m.str_arg(0, "sub");
    if (!sub) fail(m.where() + "find() takes a string");
    const auto at = s.find(*sub);
    return value::integer(at == std::string::npos ? -1 : (long long)utf32(s.substr(0, at)).size());
  }
  if (m.name == "join") {
    const value* items = m.a.arg(0, "iterable");
    if (!items) fail(m.where() + "join() needs an argument");
    std::string r;
    bool first = true;
    for (auto& x : iterate(*items)) {
      if (!x.is(kind::string)) fail(m.where() + "join() takes strings");
      r += (first ? "" : s) + x.s;
      check_bytes(r.size());
      first = false;
    }
    charge_bytes(r.size());
    return value::str(r);
  }
  if (m.name == "count") {
    const auto sub = m.str_arg(0, "sub");
    if (!sub || sub->empty()) fail(m.where() + "count() takes a non-empty string");
    long long n = 0;
    for (std::size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
    return value::integer(n);
  }
  return std::nullopt;
}

std::optional<value> dict_method(const method_call& m, const value& obj) {
  if (m.name == "items") {
    charge_items(obj.m->size());
    list_t l;
    for (auto& [k, x] : *obj.m) l.push_back(value::list({value::str(k), x}));
    return value::list(std::move(l));
  }
  if (m.name == "keys" || m.name == "values") {
    charge_items(obj.m->size());
    list_t l;
    for (auto& [k, x] : *obj.m) l.push_back(m.name == "keys" ? value::str(k) : x);
    return value::list(std::move(l));
  }
  if (m.name == "get") {
    const value* k = m.a.arg(0, "key");
    if (!k || !k->is(kind::string)) fail(m.where() + "get() takes a string key");
    const value* v = obj.find(k->s);
    if (v) return *v;
    const value* d = m.a.arg(1, "default");
    return d ? *d : value::none();
  }
  return std::nullopt;
}

}  // namespace

value call_method(const value& obj, const std::string& name, const call_args& a, int line) {
  const method_call m{name, a, line};
  if (obj.is(kind::string))
    if (auto v = str_method(m, obj.s)) return *v;
  if (obj.is(kind::dict))
    if (auto v = dict_method(m, obj)) return *v;
  need_defined(obj, ("line " + std::to_string(line) + ": ." + name + "()").c_str());
  fail(m.where() + "'" + type_name(obj) + "' object has no method '" + name + "'");
}

bool run_test(const std::string& name, const value& v, const call_args& a, int line) {
  auto arg = [&]() -> const value& {
    if (a.pos.empty()) fail("line " + std::to_string(line) + ": test '" + name + "' needs an argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is(kind::undefined);
  if (name == "undefined") return v.is(kind::undefined);
  if (name == "callable") return v.is(kind::function);
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

namespace {

// selectattr, rejectattr, select, reject: the items whose attribute (or themselves) pass a test.
value select_filter(const std::string& name, const value& v, const call_args& a, int line, const std::string& where) {
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

// map(attribute=...) or map(filter name): each item transformed.
value map_filter(const value& v, const call_args& a, int line, const std::string& where) {
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

// join(separator[, attribute]).
value join_filter(const value& v, const call_args& a, int line) {
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

}  // namespace

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
  if (name == "join") return join_filter(v, a, line);
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") return select_filter(name, v, a, line, where);
  if (name == "map") return map_filter(v, a, line, where);
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

}  // namespace troupe::chat::jinja
