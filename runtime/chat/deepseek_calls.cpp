#include "runtime/chat/deepseek_calls.h"

#include <string_view>

namespace troupe::chat {

namespace {

constexpr std::string_view calls_begin = "<｜tool▁calls▁begin｜>", calls_end = "<｜tool▁calls▁end｜>",
                           call_begin = "<｜tool▁call▁begin｜>", call_end = "<｜tool▁call▁end｜>", separator = "<｜tool▁sep｜>",
                           fence = "```json\n";
constexpr std::size_t max_head = 256;  // bytes of a name (and V3's "function") before giving up on a call

bool json_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
// Whether `s` may still grow into `whole`.
bool begins(std::string_view whole, std::string_view s) { return whole.starts_with(s); }
std::string trimmed(std::string_view s) {
  while (!s.empty() && json_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && json_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

void deepseek_calls::feed(char c, tool_events& out) {
  if (!announced_ && state_ != state::content && state_ != state::dropping) raw_ += c;
  switch (state_) {
    case state::content: return content_char(c, out);
    case state::between: return between_char(c, out);
    case state::head: return head_char(c, out);
    case state::after_sep: return after_sep_char(c, out);
    case state::name: return name_char(c, out);
    case state::fence: return fence_char(c, out);
    case state::arguments: return arguments_char(c, out);
    case state::dropping: return;
  }
}

void deepseek_calls::finish(tool_events& out) {
  switch (state_) {
    case state::content: out.content += held_; break;
    case state::arguments: emit_arguments(held_, out); break;  // as far as it got
    case state::dropping: break;
    default:
      if (!announced_) not_calls(out);  // else the unfinished call after the named ones is dropped
  }
  held_.clear();
  state_ = state::dropping;
}

void deepseek_calls::content_char(char c, tool_events& out) {
  if (after_block_ && held_.empty() && json_space(c)) return;
  after_block_ = false;
  held_ += c;
  if (held_ == calls_begin) {
    raw_ = std::exchange(held_, std::string());
    announced_ = false;
    state_ = state::between;
    return;
  }
  if (begins(calls_begin, held_)) return;
  std::size_t cut = 1;  // what cannot begin the marker is content
  while (cut < held_.size() && !begins(calls_begin, std::string_view(held_).substr(cut))) ++cut;
  out.content += held_.substr(0, cut);
  held_.erase(0, cut);
}

void deepseek_calls::between_char(char c, tool_events& out) {
  if (held_.empty() && json_space(c)) return;
  held_ += c;
  if (held_ == call_begin) {
    held_.clear();
    state_ = state::head;
    return;
  }
  if (held_ == calls_end && announced_) {
    held_.clear();
    raw_.clear();
    after_block_ = true;
    state_ = state::content;
    return;
  }
  if (begins(call_begin, held_) || (announced_ && begins(calls_end, held_))) return;
  if (!announced_) return not_calls(out);
  // Text after the calls that is not their block's end: content from here on.
  out.content += std::exchange(held_, std::string());
  state_ = state::content;
}

void deepseek_calls::head_char(char c, tool_events& out) {
  held_ += c;
  if (std::string_view(held_).ends_with(separator)) {
    head_ = held_.substr(0, held_.size() - separator.size());
    held_.clear();
    state_ = state::after_sep;
    return;
  }
  if (held_.size() > max_head + separator.size()) {
    if (!announced_) return not_calls(out);
    held_.clear();
    state_ = state::dropping;  // a broken call after named ones: nothing more is read
  }
}

// V3.1 writes the arguments right after the separator; V3 and R1 write the name there.
void deepseek_calls::after_sep_char(char c, tool_events& out) {
  if (c == '{' || c == '[') {
    const std::string name = trimmed(head_);
    if (name.empty()) return announced_ ? void(state_ = state::dropping) : not_calls(out);
    announce(name, out);
    end_ = call_end;
    state_ = state::arguments;
    return arguments_char(c, out);
  }
  state_ = state::name;
  name_char(c, out);
}

void deepseek_calls::name_char(char c, tool_events& out) {
  if (c != '\n') {
    held_ += c;
    if (held_.size() > max_head) {
      if (!announced_) return not_calls(out);
      held_.clear();
      state_ = state::dropping;
    }
    return;
  }
  const std::string name = trimmed(held_);
  held_.clear();
  if (name.empty()) return announced_ ? void(state_ = state::dropping) : not_calls(out);
  announce(name, out);
  state_ = state::fence;
}

void deepseek_calls::fence_char(char c, tool_events& out) {
  held_ += c;
  if (held_ == fence) {
    held_.clear();
    end_ = "\n```" + std::string(call_end);
    state_ = state::arguments;
    return;
  }
  if (begins(fence, held_)) return;
  // No fence: the arguments follow the name's line and end at the call's marker.
  const std::string got = std::exchange(held_, std::string());
  end_ = call_end;
  state_ = state::arguments;
  for (char x : got) arguments_char(x, out);
}

void deepseek_calls::arguments_char(char c, tool_events& out) {
  held_ += c;
  if (std::string_view(held_).ends_with(end_)) {
    emit_arguments(held_.substr(0, held_.size() - end_.size()), out);
    held_.clear();
    if (trimmed(calls_.back().arguments).empty()) emit_arguments("{}", out);
    state_ = parallel_ ? state::between : state::dropping;
    return;
  }
  // All but the longest tail that may begin the end marker goes out now.
  std::size_t keep = std::min(held_.size(), end_.size() - 1);
  while (keep > 0 && !begins(end_, std::string_view(held_).substr(held_.size() - keep))) --keep;
  emit_arguments(held_.substr(0, held_.size() - keep), out);
  held_.erase(0, held_.size() - keep);
}

void deepseek_calls::announce(std::string name, tool_events& out) {
  tool_call call;
  call.id = id_prefix_ + std::to_string(calls_.size());
  call.name = std::move(name);
  out.calls.push_back({int(calls_.size()), call.id, call.name, ""});
  calls_.push_back(std::move(call));
  announced_ = true;
  raw_.clear();
}

void deepseek_calls::emit_arguments(const std::string& s, tool_events& out) {
  if (!s.empty() && !calls_.empty()) append_arguments(calls_, out, s);
}

void deepseek_calls::not_calls(tool_events& out) {
  out.content += raw_;
  raw_.clear();
  held_.clear();
  state_ = state::content;
}

}  // namespace troupe::chat
