// The Jinja subset's evaluator (jinja.h): the render's context and budget, and the trees the
// parser builds (expressions, then template nodes), each of which evaluates or renders itself.
// Internal to runtime/chat.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/jinja_value.h"

namespace troupe::chat::jinja {

// ---------------------------------------------------------------------------------------------
// Evaluation context.

struct loop_break {};
struct loop_continue {};

// Macros called inside macros, at most: each call recurses through the renderer, and a macro may
// call itself.
constexpr int max_macro_calls = 64;

struct context {
  std::vector<std::map<std::string, value>> scopes;
  render_limits limits;
  std::size_t steps = 0;
  int macro_calls = 0;  // macro calls open now

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

// The render running on this thread, for the budget of filters and methods (charge_items).
extern thread_local context* rendering;

struct expr {
  int line = 0;
  virtual ~expr() = default;
  virtual value eval(context& c) const = 0;
};
using expr_ptr = std::unique_ptr<expr>;

struct literal : expr {
  value v;
  value eval(context&) const override;
};
struct name_ref : expr {
  std::string name;
  value eval(context& c) const override;
};
struct list_lit : expr {
  std::vector<expr_ptr> items;
  value eval(context& c) const override;
};
struct dict_lit : expr {
  std::vector<std::pair<expr_ptr, expr_ptr>> items;
  value eval(context& c) const override;
};


struct getattr_expr : expr {
  expr_ptr obj;
  std::string attr;
  value eval(context& c) const override;
};
struct getitem_expr : expr {
  expr_ptr obj, key;
  value eval(context& c) const override;
};
struct slice_expr : expr {
  expr_ptr obj, start, stop, step;
  value eval(context& c) const override;
};

value get_item(const value& obj, const value& key, int line);

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

// The builtins (jinja_builtins.cpp): str/dict/list methods, `is` tests and filters; each a
// template_error naming the line and the name it does not know.
value call_method(const value& obj, const std::string& name, const call_args& a, int line);
bool run_test(const std::string& name, const value& v, const call_args& a, int line);
value apply_filter(const std::string& name, const value& v, const call_args& a, int line);



struct call_expr : expr {
  expr_ptr callee;  // a name_ref (a global function) or a getattr_expr (a method)
  std::vector<expr_ptr> pos;
  std::vector<std::pair<std::string, expr_ptr>> kw;

  call_args args(context& c) const;

  value eval(context& c) const override;
};

struct filter_expr : expr {
  expr_ptr obj;
  std::string name;
  std::vector<expr_ptr> pos;
  std::vector<std::pair<std::string, expr_ptr>> kw;
  value eval(context& c) const override;
};

struct test_expr : expr {
  expr_ptr obj;
  std::string name;
  bool negated = false;
  std::vector<expr_ptr> pos;
  value eval(context& c) const override;
};

struct unary_expr : expr {
  std::string op;
  expr_ptr x;
  value eval(context& c) const override;
};

struct binary_expr : expr {
  std::string op;
  expr_ptr a, b;
  value eval(context& c) const override;
};

struct cond_expr : expr {
  expr_ptr cond, then, otherwise;
  value eval(context& c) const override;
};


// ---------------------------------------------------------------------------------------------
// Template structure.

struct node {
  virtual ~node() = default;
  virtual void render(context& c, std::string& out) const = 0;
};
using node_ptr = std::unique_ptr<node>;
using body = std::vector<node_ptr>;

void render_body(const body& b, context& c, std::string& out);


struct text_node : node {
  std::string text;
  void render(context&, std::string& out) const override;
};
struct output_node : node {
  expr_ptr e;
  void render(context& c, std::string& out) const override;
};
struct if_node : node {
  std::vector<std::pair<expr_ptr, body>> branches;
  body otherwise;
  void render(context& c, std::string& out) const override;
};
struct for_node : node {
  std::vector<std::string> vars;
  expr_ptr iter, filter;
  body loop_body, otherwise;
  void render(context& c, std::string& out) const override;
  void bind(context& c, const value& x) const;
};

struct set_node : node {
  std::string name, attr;  // attr set: namespace attribute assignment
  expr_ptr e;
  body captured;  // {% set x %}...{% endset %}
  bool block = false;
  void render(context& c, std::string&) const override;
};
// {% macro name(a, b=default) %}...{% endmacro %}: rendering it binds the name; a call renders
// the body to a string in a scope of its own above the scopes open where it was defined (a
// macro sees the template's variables and macros, not its caller's loop), its parameters bound
// by position or keyword, a default evaluated at the call, a missing one undefined.
struct macro_node : node {
  std::string name;
  std::vector<std::string> params;
  std::vector<expr_ptr> defaults;  // one per parameter, null where it has none
  body macro_body;
  int line = 0;
  void render(context& c, std::string&) const override;
  value call(context& c, const call_args& a, std::size_t scopes, int call_line) const;
};

struct break_node : node {
  bool is_break = true;
  void render(context&, std::string&) const override;
};

}  // namespace troupe::chat::jinja
