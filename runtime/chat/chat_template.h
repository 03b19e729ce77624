// A model's chat template (tokenizer_config.json's chat_template, rendered with the jinja
// subset) and the tokens it names.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/jinja.h"
#include "runtime/chat/reasoning.h"
#include "runtime/chat/tool_calls.h"

namespace troupe::chat {

class chat_template {
 public:
  // A model folder's template: `override_file` when given (a .jinja file), else the folder's
  // chat_template.jinja, else tokenizer_config.json's chat_template (bos/eos tokens always from
  // tokenizer_config.json). Returns nullopt when there is none; throws input_error naming the
  // file for an unreadable file or a template that does not parse.
  static std::optional<chat_template> load(const std::string& model_dir, const std::string& override_file = "");
  chat_template(const std::string& source, std::string bos, std::string eos);

  // The prompt for `messages` (an array of {role, content, ...}). `extra` adds variables
  // (tools, enable_thinking, ...). Throws input_error with the template's own message when it
  // refuses the conversation (raise_exception), or naming what was wrong otherwise.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  // The format the template renders tool calls in (infer_tool_format of its text).
  tool_format tool_calls() const { return tool_format_; }
  // How the template's model reasons (infer_reasoning_format of its text), if it does.
  const std::optional<reasoning_format>& reasoning() const { return reasoning_; }

 private:
  jinja_template tmpl_;
  std::string bos_, eos_;
  tool_format tool_format_ = tool_format::none;
  std::optional<reasoning_format> reasoning_;
};

}  // namespace troupe::chat
