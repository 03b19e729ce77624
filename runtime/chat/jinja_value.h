// The Jinja subset's values (jinja.h): Python's types as chat templates see them, and the
// operations on them that every other part of the renderer uses (printing, comparing, iterating,
// Python's str helpers on code points). Internal to runtime/chat.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/jinja_limits.h"

namespace troupe::chat::jinja {

// ---------------------------------------------------------------------------------------------
// Values: Python's types as templates see them.

struct value;
struct macro_node;  // jinja_eval.h
using list_t = std::vector<value>;
using dict_t = std::vector<std::pair<std::string, value>>;  // insertion order, like a Python dict

// Values nest no deeper than this: printing, comparing and freeing them recurse once per level.
constexpr int max_value_depth = 256;

[[noreturn]] void fail(const std::string& what);  // throws template_error(what)

struct value {
  // function: one of the global functions (raise_exception, strftime_now, ...) named as a value,
  // as `strftime_now is defined` does, or a template's {% macro %}; s holds its name.
  enum class kind { undefined, none, boolean, integer, real, string, list, dict, ns, function } k = kind::undefined;
  bool b = false;
  int depth = 0;  // lists and dicts: 1 + the deepest element's depth
  long long i = 0;
  double d = 0;
  std::string s;  // string; for undefined, the name that was looked up
  std::shared_ptr<list_t> l;
  std::shared_ptr<dict_t> m;
  // A macro: its definition (owned by the template being rendered, which outlives every value of
  // the render) and, in i, how many scopes were open where it was defined (what its body sees).
  const macro_node* macro = nullptr;

  static value none() { value v; v.k = kind::none; return v; }
  static value boolean(bool x) { value v; v.k = kind::boolean; v.b = x; return v; }
  static value integer(long long x) { value v; v.k = kind::integer; v.i = x; return v; }
  static value real(double x) { value v; v.k = kind::real; v.d = x; return v; }
  static value str(std::string x) { value v; v.k = kind::string; v.s = std::move(x); return v; }
  static value undef(std::string name) { value v; v.s = std::move(name); return v; }
  static value function(std::string name, const macro_node* macro = nullptr, long long scopes = 0) {
    value v;
    v.k = kind::function;
    v.s = std::move(name);
    v.macro = macro;
    v.i = scopes;
    return v;
  }
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


// Checks the depth on the way down: building the children first would recurse unbounded.
value from_json(const nlohmann::json& j, int depth = 0);

// Python's str methods work on code points.
std::u32string utf32(const std::string& s);
std::string utf8(const std::u32string& s);
bool py_space(char32_t c);
// Python's str.strip / lstrip / rstrip: whitespace, or any of `chars`.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string py_float(double d);
std::string py_str(const value& v);
std::string py_repr(const value& v);
// json.dumps-style (tojson): `indent` spaces per level, or one line.
void to_json(const value& v, std::optional<int> indent, int depth, std::string& out);

bool truthy(const value& v);
const char* type_name(const value& v);
void need_defined(const value& v, const char* what);
bool equal(const value& a, const value& b);
// -1, 0 or 1; a template_error naming `op` for types Python cannot order.
int compare(const value& a, const value& b, const std::string& op);
std::size_t length(const value& v);

// The work of filters, methods and builtins is counted against the budget of the render running
// on this thread, as statements and loop iterations are (a `list` or `join` of range(900000) in a
// template inside its step budget took 5.6 s): each item they make, copy or compare is a step,
// each 256 bytes they build one more, and no string they build passes the output limit.
void charge_items(std::size_t n);
void charge_bytes(std::size_t n);  // a string of n bytes has been built
void check_bytes(std::size_t n);   // a string of n bytes is being built: refused past the limit

list_t iterate(const value& v);
bool contains(const value& container, const value& item);
// Python's slice semantics on a sequence of n elements.
std::vector<std::size_t> slice_indices(long long n, std::optional<long long> start, std::optional<long long> stop,
                                       std::optional<long long> step);

}  // namespace troupe::chat::jinja
