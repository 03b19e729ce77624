// What a tool-call parser reports as a model's output streams in (runtime/chat/tool_calls.h):
// the calls found, and per piece of text the content and the calls' deltas as OpenAI streams them.
#pragma once
#include <string>
#include <string_view>
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

// More of the last call's arguments: kept in `calls` and streamed in `out`, joined to the delta
// before it when that one is already this call's arguments.
inline void append_arguments(std::vector<tool_call>& calls, tool_events& out, std::string_view s) {
  calls.back().arguments += s;
  const int index = int(calls.size()) - 1;
  if (!out.calls.empty() && out.calls.back().index == index && !out.calls.back().first())
    out.calls.back().arguments += s;
  else
    out.calls.push_back({index, "", "", std::string(s)});
}

}  // namespace troupe::chat
