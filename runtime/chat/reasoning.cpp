#include "runtime/chat/reasoning.h"

#include <algorithm>

namespace troupe::chat {

std::optional<reasoning_format> infer_reasoning_format(std::string_view t) {
  const reasoning_format f;
  if (t.find(f.start) != std::string_view::npos && t.find(f.end) != std::string_view::npos) return f;
  return std::nullopt;
}

bool prompt_opens_reasoning(std::string_view prompt, const reasoning_format& f) {
  const auto start = prompt.rfind(f.start);
  if (start == std::string_view::npos) return false;
  const auto end = prompt.rfind(f.end);
  return end == std::string_view::npos || end < start;
}

reasoning_stream::reasoning_stream(reasoning_format f, bool starts_inside)
    : f_(std::move(f)), state_(starts_inside ? state::reasoning : state::before), reasoned_(starts_inside) {}

namespace {

bool white_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
std::size_t partial_tag(std::string_view s, std::string_view tag) {
  for (std::size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

void reasoning_stream::step(reasoning_events& out) {
  for (;;) {
    if (state_ == state::answer) {
      out.content += held_;
      held_.clear();
      return;
    }
    if (state_ == state::before) {
      const auto first = std::find_if_not(held_.begin(), held_.end(), white_space) - held_.begin();
      const std::string_view rest = std::string_view(held_).substr(std::size_t(first));
      if (rest.size() < f_.start.size() && f_.start.compare(0, rest.size(), rest) == 0) return;  // may still open
      if (rest.substr(0, f_.start.size()) == f_.start) {
        held_.erase(0, std::size_t(first) + f_.start.size());  // white space before the tag goes with it
        state_ = state::reasoning;
        reasoned_ = true;
      } else {
        state_ = state::answer;
      }
      continue;
    }
    const auto end = held_.find(f_.end);
    if (end == std::string::npos) {
      const std::size_t keep = partial_tag(held_, f_.end);
      out.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return;
    }
    out.reasoning += held_.substr(0, end);
    held_.erase(0, end + f_.end.size());
    state_ = state::answer;
  }
}

reasoning_events reasoning_stream::feed(std::string_view text) {
  reasoning_events out;
  held_ += text;
  step(out);
  return out;
}

reasoning_events reasoning_stream::finish() {
  reasoning_events out;
  if (state_ == state::reasoning) out.reasoning += held_;
  else out.content += held_;
  held_.clear();
  state_ = state::answer;
  return out;
}

}  // namespace troupe::chat
