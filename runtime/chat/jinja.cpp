// The Jinja subset (jinja.h) in five parts: values (jinja_value), the expression lexer
// (jinja_lexer), the evaluator's trees (jinja_eval), the builtins (jinja_builtins) and the
// parser (jinja_parser); this file is the public face over them.
#include "runtime/chat/jinja.h"

#include "runtime/chat/jinja_eval.h"
#include "runtime/chat/jinja_parser.h"

namespace troupe::chat {

using namespace jinja;

struct jinja_template::impl {
  body root;
};

jinja_template::jinja_template(const std::string& source) {
  auto p = std::make_shared<impl>();
  p->root = jinja::parse_template(source);
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

