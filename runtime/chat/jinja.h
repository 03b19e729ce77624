// A Jinja subset for chat templates: what the chat templates of Llama 3, Qwen2/Qwen3 and
// Mistral use, rendered as Hugging Face renders them (python3-jinja2 with trim_blocks,
// lstrip_blocks and loop controls; raise_exception, strftime_now and a json.dumps-style tojson).
//
// Statements: if/elif/else, for (with else, `if` filter, unpacking, loop.*, break, continue),
// set (names and namespace attributes), comments, whitespace control (-, +). Expressions: the
// Python literals, lists, dicts, attribute/index/slice access, calls, filters, `is` tests,
// arithmetic, ~, comparisons, in, and/or/not, conditional expressions, and the str/dict methods
// templates call. What it does not know is an error naming the line, never a silent guess.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/jinja_limits.h"

namespace troupe::chat {

class jinja_template {
 public:
  // Parses; throws template_error "line N: what" on a syntax error.
  explicit jinja_template(const std::string& source);
  ~jinja_template();
  // Copies share the parsed (immutable) template.
  jinja_template(const jinja_template&);
  jinja_template& operator=(const jinja_template&);

  // Renders with `context`'s keys as variables. Throws template_raised for raise_exception and
  // template_error for an evaluation error (an undefined value used, a wrong type) or a render
  // past `limits`.
  std::string render(const nlohmann::json& context, const render_limits& limits = {}) const;

 private:
  struct impl;
  std::shared_ptr<const impl> p_;
};

}  // namespace troupe::chat
