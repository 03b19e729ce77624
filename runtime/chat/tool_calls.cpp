// One character at a time, so that where the text was split cannot change what is found: the
// opening marker is matched against held-back content, the call object is scanned member by
// member (only its top level is interpreted; nested values are passed through as text), and
// the arguments' text goes out as it arrives once the call's name is known.
#include "runtime/chat/tool_calls.h"

#include <nlohmann/json.hpp>

namespace troupe::chat {

namespace {

bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

constexpr std::string_view hermes_open = "<tool_call>", hermes_close = "</tool_call>";
constexpr std::string_view mistral_open = "[TOOL_CALLS]", granite_open = "<|tool_call|>", python_tag = "<|python_tag|>";

// A marker, then a JSON list of calls.
bool marked_list(tool_format f) { return f == tool_format::mistral || f == tool_format::granite; }

// The opening marker content is watched for; empty: calls only open the output.
std::string_view opening_marker(tool_format f, bool at_start) {
  switch (f) {
    case tool_format::hermes: return hermes_open;
    case tool_format::mistral: return mistral_open;
    case tool_format::granite: return granite_open;
    case tool_format::llama3_json: return at_start ? python_tag : std::string_view();
    default: return {};
  }
}

std::optional<std::string> json_string(const std::string& raw) {
  try {
    auto v = nlohmann::json::parse(raw);
    if (v.is_string()) return v.get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

}  // namespace

const char* tool_format_name(tool_format f) {
  switch (f) {
    case tool_format::none: return "none";
    case tool_format::hermes: return "hermes";
    case tool_format::llama3_json: return "llama3_json";
    case tool_format::mistral: return "mistral";
    case tool_format::granite: return "granite";
    case tool_format::deepseek_v3: return "deepseek_v3";
    case tool_format::pythonic: return "pythonic";
    case tool_format::json_array: return "json_array";
  }
  return "none";
}

std::optional<tool_format> tool_format_named(std::string_view name) {
  for (auto f : {tool_format::none, tool_format::hermes, tool_format::llama3_json, tool_format::mistral, tool_format::granite,
                 tool_format::deepseek_v3, tool_format::pythonic, tool_format::json_array})
    if (name == tool_format_name(f)) return f;
  return std::nullopt;
}

std::string model_tool_formats() {
  std::string s;
  for (auto f : {tool_format::hermes, tool_format::llama3_json, tool_format::mistral, tool_format::granite, tool_format::deepseek_v3,
                 tool_format::pythonic, tool_format::none})
    s += std::string(s.empty() ? "" : ", ") + tool_format_name(f);
  return s;
}

tool_format infer_tool_format(std::string_view t) {
  if (t.find(hermes_open) != std::string_view::npos) return tool_format::hermes;
  if (t.find(mistral_open) != std::string_view::npos) return tool_format::mistral;
  if (t.find(granite_open) != std::string_view::npos) return tool_format::granite;
  if (t.find("<｜tool▁calls▁begin｜>") != std::string_view::npos) return tool_format::deepseek_v3;
  // Llama 3.2/4's pythonic templates show the model the form [func_name1(params_name1=...), ...].
  if (t.find("[func_name1(") != std::string_view::npos) return tool_format::pythonic;
  // Llama 3.1+: tool results come back as the ipython role, calls as {"name": ..., "parameters": ...}.
  if (t.find("ipython") != std::string_view::npos && t.find("parameters") != std::string_view::npos) return tool_format::llama3_json;
  return tool_format::none;
}

tool_call_stream::tool_call_stream(tool_format format, std::string id_prefix, bool parallel)
    : format_(format), id_prefix_(std::move(id_prefix)), parallel_(parallel), deepseek_(id_prefix_, parallel),
      pythonic_(id_prefix_, parallel) {}

tool_events tool_call_stream::feed(std::string_view text) {
  tool_events out;
  if (format_ == tool_format::deepseek_v3) {
    for (char c : text) deepseek_.feed(c, out);
    return out;
  }
  if (format_ == tool_format::pythonic) {
    for (char c : text) pythonic_.feed(c, out);
    return out;
  }
  for (char c : text) step(c, out);
  return out;
}

tool_events tool_call_stream::finish() {
  tool_events out;
  if (format_ == tool_format::deepseek_v3) {
    deepseek_.finish(out);
    return out;
  }
  if (format_ == tool_format::pythonic) {
    pythonic_.finish(out);
    return out;
  }
  switch (state_) {
    case state::content: out.content += held_; break;
    case state::before_call: not_a_call(out); break;
    case state::object:
      if (!announced_) not_a_call(out);  // else the call stays, as far as it got
      break;
    default: break;
  }
  held_.clear();
  state_ = state::dropping;
  return out;
}

void tool_call_stream::step(char c, tool_events& out) {
  switch (state_) {
    case state::content: return content_char(c, out);
    case state::before_call: return before_call_char(c, out);
    case state::object: return object_char(c, out);
    case state::after_call:
    case state::closing: return after_call_char(c, out);
    case state::dropping: return;
  }
}

void tool_call_stream::content_char(char c, tool_events& out) {
  if (format_ == tool_format::none) {
    out.content += c;
    return;
  }
  if (after_a_call_ && held_.empty() && space(c)) return;  // between calls, and after the last
  if (at_start_ && space(c)) {  // held: dropped if a call opens the output
    held_ += c;
    return;
  }
  const bool opens_output = at_start_ && (format_ == tool_format::llama3_json || format_ == tool_format::json_array);
  if (opens_output && (c == '{' || (c == '[' && format_ == tool_format::json_array))) {
    raw_ = std::exchange(held_, std::string());
    at_start_ = false;
    if (c == '{') {
      begin_call();
      return object_char(c, out);
    }
    raw_ += c;
    state_ = state::before_call;
    return;
  }
  const std::string_view marker = opening_marker(format_, at_start_);
  std::size_t lead = 0;  // whitespace held at the start is not part of the marker
  while (lead < held_.size() && space(held_[lead])) ++lead;
  if (marker.empty() && lead == 0) {
    at_start_ = after_a_call_ = false;
    out.content += c;
    return;
  }
  held_ += c;
  const std::string_view cand = std::string_view(held_).substr(lead);
  if (!marker.empty() && cand == marker) {
    raw_ = std::exchange(held_, std::string());
    at_start_ = after_a_call_ = false;
    need_bracket_ = marked_list(format_);
    state_ = state::before_call;
    return;
  }
  if (!marker.empty() && starts_with(marker, cand)) return;
  // Not the marker: what cannot begin a later one is content.
  at_start_ = after_a_call_ = false;
  const std::string_view later = opening_marker(format_, false);
  std::size_t cut = 0;
  while (cut < held_.size() && (later.empty() || !starts_with(later, std::string_view(held_).substr(cut)))) ++cut;
  out.content += held_.substr(0, cut);
  held_.erase(0, cut);
}

void tool_call_stream::before_call_char(char c, tool_events& out) {
  raw_ += c;
  if (space(c)) return;
  if (need_bracket_) {
    need_bracket_ = false;
    if (c == '[') return;
    return not_a_call(out);
  }
  if (c == '{') {
    raw_.pop_back();
    begin_call();
    return object_char(c, out);
  }
  const bool list = marked_list(format_) || format_ == tool_format::json_array;
  if (list && c == ']' && !calls_.empty()) {  // the list ends after a ','
    raw_.clear();
    state_ = state::content;
    after_a_call_ = true;
    return;
  }
  not_a_call(out);
}

void tool_call_stream::begin_call() {
  state_ = state::object;
  member_ = member::key;
  depth_ = -1;
  opened_ = in_string_ = escaped_ = primitive_ = false;
  key_raw_.clear();
  value_raw_.clear();
  key_.clear();
  pending_arguments_.clear();
  have_name_ = have_arguments_ = announced_ = false;
}

namespace {
bool arguments_key(const std::string& k) { return k == "arguments" || k == "parameters"; }
}  // namespace

// A failed call: content if its name has not gone out; else it stays, and the rest is dropped.
#define TROUPE_FAIL_CALL()                \
  do {                                    \
    if (announced_) {                     \
      end_call(out);                      \
      state_ = state::dropping;           \
    } else {                              \
      not_a_call(out);                    \
    }                                     \
    return;                               \
  } while (0)

// The call object: depth_ -1 is between its members, -2 inside a key, 0 and up inside a value
// (the brackets open in it).
void tool_call_stream::object_char(char c, tool_events& out) {
  raw_ += c;
  if (!opened_) {
    opened_ = true;  // the '{' (begin_call is only called on it)
    return;
  }
  if (depth_ == -2) return key_char(c, out);
  if (depth_ == -1) return between_members(c, out);
  if (primitive_) return primitive_char(c, out);
  value_char(c, out);
}

// Inside a key's string.
void tool_call_stream::key_char(char c, tool_events& out) {
  key_raw_ += c;
  if (escaped_) {
    escaped_ = false;
  } else if (c == '\\') {
    escaped_ = true;
  } else if (c == '"') {
    auto k = json_string(key_raw_);
    if (!k) TROUPE_FAIL_CALL();
    key_ = *k;
    key_raw_.clear();
    // A llama3_json answer that is a JSON object but not a call: a key calls never have.
    if (format_ == tool_format::llama3_json && !have_name_ && key_ != "name" && key_ != "type" && !arguments_key(key_))
      TROUPE_FAIL_CALL();
    depth_ = -1;
    member_ = member::colon;
  }
}

// Between members: a key's opening quote, the colon, a value's first character, a comma or the end.
void tool_call_stream::between_members(char c, tool_events& out) {
  if (space(c)) return;
  switch (member_) {
    case member::key:
      if (c == '"') {
        key_raw_ = "\"";
        escaped_ = false;
        depth_ = -2;
        return;
      }
      if (c == '}' && key_.empty()) return end_call(out);  // {}
      TROUPE_FAIL_CALL();
    case member::colon:
      if (c != ':') TROUPE_FAIL_CALL();
      member_ = member::value;
      return;
    case member::value:
      if (c == ',' || c == '}' || c == ']' || c == ':') TROUPE_FAIL_CALL();
      return start_value(c, out);
    case member::after:
      if (c == ',') {
        member_ = member::key;
        return;
      }
      if (c == '}') return end_call(out);
      TROUPE_FAIL_CALL();
  }
}

// A number, true, false or null: ends at what follows it.
void tool_call_stream::primitive_char(char c, tool_events& out) {
  if (space(c) || c == ',' || c == '}') {
    member_done(out);
    if (state_ != state::object) return;  // not a call: raw_ (with c) went out as content
    raw_.pop_back();
    depth_ = -1;
    member_ = member::after;
    return object_char(c, out);
  }
  value_raw_ += c;
}

// Inside a string, object or array value; the arguments stream out as they come.
void tool_call_stream::value_char(char c, tool_events& out) {
  value_raw_ += c;
  if (arguments_key(key_) && !have_arguments_ && value_raw_[0] != '"') emit_arguments(std::string_view(&c, 1), out);
  bool done = false;
  if (in_string_) {
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == '"') {
      in_string_ = false;
      done = depth_ == 0;
    }
  } else if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    done = --depth_ == 0;
  }
  if (done) {
    member_done(out);
    if (state_ != state::object) return;
    depth_ = -1;
    member_ = member::after;
  }
}

#undef TROUPE_FAIL_CALL

void tool_call_stream::start_value(char c, tool_events& out) {
  value_raw_ = std::string(1, c);
  primitive_ = c != '{' && c != '[' && c != '"';
  in_string_ = c == '"';
  escaped_ = false;
  depth_ = (c == '{' || c == '[') ? 1 : 0;
  if (arguments_key(key_) && !have_arguments_ && depth_ == 1) emit_arguments(std::string_view(&c, 1), out);
}

void tool_call_stream::member_done(tool_events& out) {
  const std::string& k = key_;
  if (k == "name") {
    auto n = json_string(value_raw_);
    if (!n || n->empty() || have_name_) {
      if (announced_) return;
      return not_a_call(out);
    }
    have_name_ = true;
    announced_ = true;
    tool_call call;
    call.id = id_prefix_ + std::to_string(calls_.size());
    call.name = std::move(*n);
    out.calls.push_back({int(calls_.size()), call.id, call.name, ""});
    calls_.push_back(std::move(call));
    if (!pending_arguments_.empty()) emit_arguments(std::exchange(pending_arguments_, std::string()), out);
  } else if (arguments_key(k)) {
    if (have_arguments_) return;
    have_arguments_ = true;
    if (value_raw_[0] == '"') {  // arguments sent as a JSON string: its text is the JSON
      auto s = json_string(value_raw_);
      if (!s) return;
      emit_arguments(*s, out);
    } else if (primitive_) {  // null
      emit_arguments("{}", out);
    }
  }
}

void tool_call_stream::emit_arguments(std::string_view s, tool_events& out) {
  if (!announced_) {
    pending_arguments_ += s;
    return;
  }
  append_arguments(calls_, out, s);
}

void tool_call_stream::end_call(tool_events& out) {
  if (!announced_) return not_a_call(out);
  if (!have_arguments_) {
    have_arguments_ = true;
    emit_arguments("{}", out);
  }
  raw_.clear();
  closing_matched_ = 0;
  state_ = parallel_ ? state::after_call : state::dropping;
  after_a_call_ = true;
}

void tool_call_stream::not_a_call(tool_events& out) {
  out.content += raw_;
  raw_.clear();
  state_ = state::content;
  at_start_ = false;
  after_a_call_ = false;
}

void tool_call_stream::after_call_char(char c, tool_events& out) {
  if (state_ == state::closing) {  // hermes: </tool_call>
    if (c == hermes_close[closing_matched_]) {
      if (++closing_matched_ == hermes_close.size()) state_ = state::content;
      return;
    }
    state_ = state::content;  // not closed as it should be: what follows is content
    return content_char(c, out);
  }
  if (space(c)) return;
  switch (format_) {
    case tool_format::hermes:
      if (c == '<') {
        state_ = state::closing;
        closing_matched_ = 1;
        return;
      }
      break;
    case tool_format::mistral:
    case tool_format::granite:
    case tool_format::json_array:
      if (c == ',') {
        state_ = state::before_call;
        return;
      }
      if (c == ']') {
        state_ = state::content;
        return;
      }
      break;
    case tool_format::llama3_json:
      if (c == ';') {
        state_ = state::before_call;
        return;
      }
      if (c == '{') {
        begin_call();
        return object_char(c, out);
      }
      break;
    default: break;
  }
  state_ = state::content;
  content_char(c, out);
}

}  // namespace troupe::chat
