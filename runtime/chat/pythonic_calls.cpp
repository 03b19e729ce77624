#include "runtime/chat/pythonic_calls.h"

#include <cctype>
#include <charconv>

#include <nlohmann/json.hpp>

namespace troupe::chat {

namespace {

constexpr std::string_view python_start = "<|python_start|>", python_end = "<|python_end|>";
constexpr std::size_t max_call_bytes = 64 * 1024;  // one call's arguments, at most
constexpr int max_nesting = 64;                     // literals inside literals, at most

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool name_char_of(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// Python literals (what a pythonic call's arguments hold) read into JSON.
class literal_reader {
 public:
  explicit literal_reader(std::string_view s) : s_(s) {}

  std::optional<nlohmann::ordered_json> keyword_arguments() {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    while (true) {
      skip();
      if (at_end()) return args;
      const std::size_t begin = p_;
      while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
      if (p_ == begin || std::isdigit(static_cast<unsigned char>(s_[begin]))) return std::nullopt;  // positional, or not a name
      const std::string key(s_.substr(begin, p_ - begin));
      skip();
      if (!take('=')) return std::nullopt;
      auto v = value(0);
      if (!v || args.contains(key)) return std::nullopt;
      args[key] = std::move(*v);
      skip();
      if (at_end()) return args;
      if (!take(',')) return std::nullopt;
    }
  }

 private:
  bool at_end() const { return p_ >= s_.size(); }
  void skip() {
    while (p_ < s_.size() && blank(s_[p_])) ++p_;
  }
  bool take(char c) {
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    const std::size_t end = p_ + w.size();
    if (end < s_.size() && name_char_of(s_[end])) return false;
    p_ = end;
    return true;
  }

  std::optional<nlohmann::ordered_json> value(int depth) {
    if (depth > max_nesting) return std::nullopt;
    skip();
    if (at_end()) return std::nullopt;
    const char c = s_[p_];
    if (c == '"' || c == '\'') return string();
    if (word("True")) return nlohmann::ordered_json(true);
    if (word("False")) return nlohmann::ordered_json(false);
    if (word("None")) return nlohmann::ordered_json(nullptr);
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return mapping(depth);
    return number();
  }

  std::optional<nlohmann::ordered_json> sequence(char close, int depth) {
    ++p_;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    while (true) {
      skip();
      if (take(close)) return out;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      skip();
      if (take(close)) return out;
      if (!take(',')) return std::nullopt;
    }
  }

  std::optional<nlohmann::ordered_json> mapping(int depth) {
    ++p_;
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    while (true) {
      skip();
      if (take('}')) return out;
      auto k = value(depth + 1);
      if (!k || !k->is_string()) return std::nullopt;  // JSON keys are strings
      skip();
      if (!take(':')) return std::nullopt;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      out[k->get<std::string>()] = std::move(*v);
      skip();
      if (take('}')) return out;
      if (!take(',')) return std::nullopt;
    }
  }

  // A string in either quote, single or triple, with Python's escapes.
  std::optional<nlohmann::ordered_json> string() {
    const char q = s_[p_];
    const bool triple = s_.substr(p_, 3) == std::string(3, q);
    p_ += triple ? 3 : 1;
    std::string out;
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == q && (!triple || s_.substr(p_, 3) == std::string(3, q))) {
        p_ += triple ? 3 : 1;
        return nlohmann::ordered_json(std::move(out));
      }
      if (c == '\n' && !triple) return std::nullopt;
      ++p_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) return std::nullopt;
      const char e = s_[p_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': case '\'': case '"': out += e; break;
        case '\n': break;  // a line continued
        case 'x': case 'u': case 'U': {
          const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          unsigned long cp = 0;
          if (p_ + digits > s_.size()) return std::nullopt;
          auto r = std::from_chars(s_.data() + p_, s_.data() + p_ + digits, cp, 16);
          if (r.ptr != s_.data() + p_ + digits || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
          p_ += digits;
          append_utf8(out, char32_t(cp));
          break;
        }
        default: out += '\\', out += e;  // Python keeps an unknown escape as written
      }
    }
    return std::nullopt;
  }

  static void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)),
          out += char(0x80 | (cp & 0x3F));
    }
  }

  // An int or a float as Python writes them (no underscores, no hex).
  std::optional<nlohmann::ordered_json> number() {
    const std::size_t begin = p_;
    if (p_ < s_.size() && (s_[p_] == '-' || s_[p_] == '+')) ++p_;
    bool real = false, digits = false;
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        digits = true;
      } else if (c == '.' || c == 'e' || c == 'E') {
        real = true;
      } else if ((c == '-' || c == '+') && (s_[p_ - 1] == 'e' || s_[p_ - 1] == 'E')) {
      } else {
        break;
      }
      ++p_;
    }
    if (!digits) return std::nullopt;
    std::string text(s_.substr(begin, p_ - begin));
    if (text[0] == '+') text.erase(0, 1);
    if (!real) {
      long long i = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), i);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return nlohmann::ordered_json(i);
    }
    try {
      std::size_t used = 0;
      const double d = std::stod(text, &used);
      if (used == text.size()) return nlohmann::ordered_json(d);
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }

  std::string_view s_;
  std::size_t p_ = 0;
};

}  // namespace

std::optional<std::string> pythonic_arguments_json(std::string_view arguments) {
  auto args = literal_reader(arguments).keyword_arguments();
  if (!args) return std::nullopt;
  return args->dump();
}

void pythonic_calls::feed(char c, tool_events& out) {
  if (state_ != state::content && state_ != state::dropping && state_ != state::after_list) raw_ += c;
  switch (state_) {
    case state::start: return start_char(c, out);
    case state::name: return name_char(c, out);
    case state::arguments: return arguments_char(c, out);
    case state::after_call: return after_call_char(c, out);
    case state::after_list: return after_list_char(c, out);
    case state::content: out.content += c; return;
    case state::dropping: return;
  }
}

void pythonic_calls::finish(tool_events& out) {
  switch (state_) {
    case state::start:
    case state::name:
    case state::arguments:
    case state::after_call: not_calls(out); break;
    case state::after_list:
      if (tag_ != python_end.size()) out.content += held_;  // not the whole closing tag: text
      break;
    default: break;
  }
  state_ = state::dropping;
}

void pythonic_calls::start_char(char c, tool_events& out) {
  if (tag_ > 0 && tag_ < python_start.size()) {  // inside <|python_start|>
    if (c != python_start[tag_]) return not_calls(out);
    ++tag_;
    return;
  }
  if (blank(c)) return;
  if (c == '[') {
    field_.clear();
    state_ = state::name;
    return;
  }
  if (tag_ == 0 && c == python_start[0]) {
    tag_ = 1;
    return;
  }
  not_calls(out);
}

void pythonic_calls::name_char(char c, tool_events& out) {
  if (blank(c) && field_.empty()) return;
  if (name_char_of(c) && field_.size() < 256) {
    field_ += c;
    return;
  }
  if (c == '(' && !field_.empty() && !std::isdigit(static_cast<unsigned char>(field_[0]))) {
    name_ = std::exchange(field_, std::string());
    depth_ = 0;
    quote_ = 0;
    escaped_ = false;
    state_ = state::arguments;
    return;
  }
  not_calls(out);
}

void pythonic_calls::arguments_char(char c, tool_events& out) {
  if (field_.size() >= max_call_bytes) return not_calls(out);
  if (quote_) {
    field_ += c;
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == quote_) quote_ = 0;  // a triple-quoted string reads as three strings here: the same brackets
    return;
  }
  if (c == '"' || c == '\'') {
    quote_ = c;
  } else if (c == '(' || c == '[' || c == '{') {
    ++depth_;
  } else if (c == ')' || c == ']' || c == '}') {
    if (depth_ == 0) {
      if (c != ')') return not_calls(out);
      auto args = pythonic_arguments_json(field_);
      if (!args) return not_calls(out);
      pending_.push_back({"", name_, std::move(*args)});
      state_ = state::after_call;
      return;
    }
    --depth_;
  }
  field_ += c;
}

void pythonic_calls::after_call_char(char c, tool_events& out) {
  if (blank(c)) return;
  if (c == ',') {
    field_.clear();
    state_ = state::name;
    return;
  }
  if (c != ']') return not_calls(out);
  for (auto& call : pending_) {
    if (!parallel_ && !calls_.empty()) break;
    call.id = id_prefix_ + std::to_string(calls_.size());
    const int index = int(calls_.size());
    out.calls.push_back({index, call.id, call.name, ""});
    out.calls.push_back({index, "", "", call.arguments});
    calls_.push_back(std::move(call));
  }
  pending_.clear();
  raw_.clear();
  tag_ = 0;
  held_.clear();
  state_ = parallel_ ? state::after_list : state::dropping;
}

// After the list: white space and Llama 4's <|python_end|> are not content; other text is.
void pythonic_calls::after_list_char(char c, tool_events& out) {
  if (held_.empty() && blank(c)) return;
  held_ += c;
  if (tag_ < python_end.size() && c == python_end[tag_]) {
    if (++tag_ == python_end.size()) held_.clear();
    return;
  }
  out.content += std::exchange(held_, std::string());
  state_ = state::content;
}

void pythonic_calls::not_calls(tool_events& out) {
  out.content += std::exchange(raw_, std::string());
  pending_.clear();
  state_ = state::content;
}

}  // namespace troupe::chat
