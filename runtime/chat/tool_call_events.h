// What a tool-call parser reports as a model's output streams in (runtime/chat/tool_calls.h):
// the calls found, and per piece of text the content and the calls' deltas as OpenAI streams them.
#pragma once
#include <string>
#include <vector>

namespace troupe::chat {

struct tool_call {
  std::string id, name;
  std::string arguments;  // JSON text, as the model wrote it
};

struct tool_call_delta {
  int index = 0;
  std::string id, name;   // the first delta of a call only
  std::string arguments;  // later deltas: the next fragment
  bool first() const { return !id.empty(); }
};

struct tool_events {
  std::string content;
  std::vector<tool_call_delta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

}  // namespace troupe::chat
