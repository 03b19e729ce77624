// Pythonic tool calls, for tool_call_stream (runtime/chat/tool_calls.h) whose contract this
// keeps: the answer is a Python list of calls with keyword arguments, as Llama 3.2's and Llama
// 4's pythonic templates (and ToolACE-style models) have the model write them:
//
//   [get_weather(city="Paris", days=3), get_time(zone='CET', exact=True)]
//
// optionally between <|python_start|> and <|python_end|> (Llama 4). Each argument's value is a
// Python literal (a string in either quote, a number, True/False/None, a list, tuple or dict of
// them), and the arguments are reported as the JSON object they make. The calls go out when the
// list closes (a call's name, then its arguments), since a later call that is not one makes the
// whole list content. An answer
// that does not open with '[' (after white space and the optional tag) is content; so is the
// whole list when any call in it is not a call (a positional argument, an expression, a broken
// literal) or when the output ends inside it, and text after the list. With parallel = false
// only the first call is reported.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/tool_call_events.h"

namespace troupe::chat {

// A call's keyword arguments ("city='Paris', n=3") as a JSON object's text; nullopt when they
// are not keyword arguments with literal values.
std::optional<std::string> pythonic_arguments_json(std::string_view arguments);

class pythonic_calls {
 public:
  pythonic_calls() = default;
  pythonic_calls(std::string id_prefix, bool parallel) : id_prefix_(std::move(id_prefix)), parallel_(parallel) {}
  void feed(char c, tool_events& out);
  void finish(tool_events& out);
  const std::vector<tool_call>& calls() const { return calls_; }

 private:
  enum class state { start, name, arguments, after_call, after_list, content, dropping };
  void start_char(char c, tool_events& out);
  void name_char(char c, tool_events& out);
  void arguments_char(char c, tool_events& out);
  void after_call_char(char c, tool_events& out);
  void after_list_char(char c, tool_events& out);
  void not_calls(tool_events& out);  // everything read is content, and what follows

  std::string id_prefix_;
  bool parallel_ = true;
  state state_ = state::start;
  std::string raw_;    // the output since its start, while it may still be calls
  std::string held_;   // white space and a possible <|python_start|> before the list
  std::string field_;  // the current call's name, then its arguments' text
  std::string name_;
  std::vector<tool_call> pending_;  // calls parsed, reported when the list closes
  std::size_t tag_ = 0;             // bytes of <|python_start|> (before the list) or <|python_end|> (after) read
  int depth_ = 0;                   // brackets open inside the arguments
  char quote_ = 0;                  // the string the arguments are inside, if any
  bool escaped_ = false;
  std::vector<tool_call> calls_;
};

}  // namespace troupe::chat
