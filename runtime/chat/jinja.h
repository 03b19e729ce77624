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
#include <cstddef>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::chat {

class template_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A template's own raise_exception(): the conversation is wrong, not the template.
class template_raised : public template_error {
 public:
  using template_error::template_error;
};

// What one render may spend. A template comes from a model folder: it is code from outside, and
// `range(100000000)` must fail its request, not stall the server.
struct render_limits {
  std::size_t max_steps = 1'000'000;   // statements run, loop iterations, items range() makes, 256 B built
  std::size_t max_output = 16u << 20;  // bytes of output, and of any one string built
};

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
