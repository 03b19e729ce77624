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

void render_body(const body& b, context& c, std::string& out) {
  for (auto& n : b) {
    c.charge(1);
    n->render(c, out);
    if (out.size() > c.limits.max_output)
      fail("the template's output passed the limit of " + std::to_string(c.limits.max_output) + " bytes");
  }
}

namespace {

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

}  // namespace

value literal::eval(context&) const { return v; }

// A name the template did not set and the caller did not pass may be a global function.
value name_ref::eval(context& c) const {
  value v = c.lookup(name);
  if (v.is(kind::undefined) && (name == "raise_exception" || name == "strftime_now" || name == "namespace" ||
                                name == "range" || name == "dict"))
    return value::function(name);
  return v;
}

value list_lit::eval(context& c) const {
  list_t l;
  for (auto& e : items) l.push_back(e->eval(c));
  return value::list(std::move(l));
}

value dict_lit::eval(context& c) const {
  dict_t m;
  for (auto& [k, v] : items) {
    value key = k->eval(c);
    if (!key.is(kind::string)) fail("line " + std::to_string(line) + ": dict keys must be strings here");
    m.emplace_back(key.s, v->eval(c));
  }
  return value::dict(std::move(m));
}

value getattr_expr::eval(context& c) const { return get_item(obj->eval(c), value::str(attr), line); }

value getitem_expr::eval(context& c) const { return get_item(obj->eval(c), key->eval(c), line); }

value slice_expr::eval(context& c) const {
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

call_args call_expr::args(context& c) const {
  call_args a;
  for (auto& e : pos) a.pos.push_back(e->eval(c));
  for (auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(c));
  return a;
}

value call_expr::eval(context& c) const {
  const std::string where = "line " + std::to_string(line) + ": ";
  if (auto* m = dynamic_cast<const getattr_expr*>(callee.get())) return call_method(m->obj->eval(c), m->attr, args(c), line);
  auto* n = dynamic_cast<const name_ref*>(callee.get());
  if (!n) fail(where + "only functions and methods can be called");
  const call_args a = args(c);
  if (const value f = c.lookup(n->name); f.is(kind::function) && f.macro) return f.macro->call(c, a, std::size_t(f.i), line);
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

value filter_expr::eval(context& c) const {
  call_args a;
  for (auto& e : pos) a.pos.push_back(e->eval(c));
  for (auto& [k, e] : kw) a.kw.emplace_back(k, e->eval(c));
  return apply_filter(name, obj->eval(c), a, line);
}

value test_expr::eval(context& c) const {
  call_args a;
  for (auto& e : pos) a.pos.push_back(e->eval(c));
  return value::boolean(run_test(name, obj->eval(c), a, line) != negated);
}

value unary_expr::eval(context& c) const {
  value v = x->eval(c);
  if (op == "not") return value::boolean(!truthy(v));
  if (v.is(kind::integer)) return value::integer(op == "-" ? -v.i : v.i);
  if (v.is(kind::real)) return value::real(op == "-" ? -v.d : v.d);
  need_defined(v, "unary operator");
  fail("line " + std::to_string(line) + ": bad operand for unary " + op + ": " + type_name(v));
}

namespace {

// + - * ** / // % on numbers as Python computes them: integers stay integers (an overflow is an
// error, not a wrap), floor division and modulo round toward negative infinity.
value arithmetic(const std::string& op, const value& x, const value& y, const std::string& where) {
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

}  // namespace

value binary_expr::eval(context& c) const {
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
  return arithmetic(op, x, y, where);
}

value cond_expr::eval(context& c) const {
  if (truthy(cond->eval(c))) return then->eval(c);
  return otherwise ? otherwise->eval(c) : value::undef("conditional expression without else");
}

void text_node::render(context&, std::string& out) const { out += text; }

void output_node::render(context& c, std::string& out) const { out += py_str(e->eval(c)); }

void if_node::render(context& c, std::string& out) const {
  for (auto& [cond, b] : branches)
    if (truthy(cond->eval(c))) return render_body(b, c, out);
  render_body(otherwise, c, out);
}

void for_node::render(context& c, std::string& out) const {
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

void for_node::bind(context& c, const value& x) const {
  if (vars.size() == 1) return c.set(vars[0], x);
  list_t parts = iterate(x);
  if (parts.size() != vars.size()) fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(vars.size()));
  for (std::size_t i = 0; i < vars.size(); ++i) c.set(vars[i], parts[i]);
}

void set_node::render(context& c, std::string&) const {
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

void macro_node::render(context& c, std::string&) const { c.set(name, value::function(name, this, (long long)c.scopes.size())); }

value macro_node::call(context& c, const call_args& a, std::size_t scopes, int call_line) const {
  const std::string where = "line " + std::to_string(call_line) + ": ";
  if (a.pos.size() > params.size())
    fail(where + "macro '" + name + "' takes not more than " + std::to_string(params.size()) + " argument(s)");
  for (auto& [k, v] : a.kw)
    if (std::find(params.begin(), params.end(), k) == params.end()) fail(where + "macro '" + name + "' takes no keyword argument '" + k + "'");
  if (c.macro_calls >= max_macro_calls) fail(where + "macros called more than " + std::to_string(max_macro_calls) + " deep");
  c.charge(1);
  // The caller's scopes above the definition's are set aside for the call and put back after it.
  std::vector<std::map<std::string, value>> callers(std::make_move_iterator(c.scopes.begin() + std::ptrdiff_t(std::min(scopes, c.scopes.size()))),
                                                    std::make_move_iterator(c.scopes.end()));
  c.scopes.resize(std::min(scopes, c.scopes.size()));
  struct restore {
    context& c;
    std::size_t depth;
    std::vector<std::map<std::string, value>>& callers;
    ~restore() {
      c.scopes.resize(depth);
      for (auto& s : callers) c.scopes.push_back(std::move(s));
      --c.macro_calls;
    }
  } put_back{c, c.scopes.size(), callers};
  ++c.macro_calls;
  c.scopes.emplace_back();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (i < a.pos.size()) c.set(params[i], a.pos[i]);
    else if (const value* v = a.kwarg(params[i])) c.set(params[i], *v);
    else c.set(params[i], defaults[i] ? defaults[i]->eval(c) : value::undef(params[i]));
  }
  std::string out;
  render_body(macro_body, c, out);
  return value::str(std::move(out));
}

void break_node::render(context&, std::string&) const {
  if (is_break) throw loop_break{};
  throw loop_continue{};
}

}  // namespace troupe::chat::jinja
