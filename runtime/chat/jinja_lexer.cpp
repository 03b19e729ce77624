#include "runtime/chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <functional>

#include "runtime/chat/jinja_value.h"

namespace troupe::chat::jinja {

namespace {

using lex_error = std::function<void(const std::string&)>;  // throws, naming the tag's line

// The integer or float literal at src[p] (digits, '_', one '.', an exponent); p moves past it.
token number_token(const std::string& src, std::size_t& p, const lex_error& err) {
  std::size_t q = p;
  bool real = false;
  while (q < src.size() && (std::isdigit(static_cast<unsigned char>(src[q])) || src[q] == '_' ||
                            (src[q] == '.' && !real && q + 1 < src.size() && std::isdigit(static_cast<unsigned char>(src[q + 1]))))) {
    real |= src[q] == '.';
    ++q;
  }
  if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {  // an exponent: 1e3, 2.5E-4
    std::size_t r = q + 1;
    if (r < src.size() && (src[r] == '+' || src[r] == '-')) ++r;
    if (r < src.size() && std::isdigit(static_cast<unsigned char>(src[r]))) {
      while (r < src.size() && std::isdigit(static_cast<unsigned char>(src[r]))) ++r;
      q = r;
      real = true;
    }
  }
  std::string num = src.substr(p, q - p);
  num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
  token t;
  t.t = real ? token::type::real : token::type::integer;
  t.text = num;
  if (real) {
    t.d = std::strtod(num.c_str(), nullptr);  // past double's range: inf, as Python's float() gives
  } else {
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), t.i);
    if (ec != std::errc() || end != num.data() + num.size()) err("integer literal " + num + " is out of range");
  }
  p = q;
  return t;
}

// The quoted string at src[p] (its quote character ends it), escapes decoded; p moves past it.
token string_token(const std::string& src, std::size_t& p, const lex_error& err) {
  const char c = src[p];
  std::string s;
  std::size_t q = p + 1;
  for (; q < src.size() && src[q] != c; ++q) {
    if (src[q] == '\\' && q + 1 < src.size()) {
      const char e = src[++q];
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case '\\': s += '\\'; break;
        case '\'': s += '\''; break;
        case '"': s += '"'; break;
        case '0': s += '\0'; break;
        case 'u':
        case 'x': {
          const std::size_t n = e == 'u' ? 4 : 2;
          if (q + n >= src.size()) err("bad escape in string");
          unsigned code = 0;
          const auto [end, ec] = std::from_chars(src.data() + q + 1, src.data() + q + 1 + n, code, 16);
          if (ec != std::errc() || end != src.data() + q + 1 + n) err("bad escape in string");
          s += utf8(std::u32string(1, char32_t(code)));
          q += n;
          break;
        }
        default: s += '\\'; s += e;
      }
    } else {
      s += src[q];
    }
  }
  if (q >= src.size()) err("unterminated string");
  p = q + 1;
  return {token::type::string, s};
}

}  // namespace

std::vector<token> tokenize(const std::string& src, int line) {
  std::vector<token> out;
  std::size_t p = 0;
  const lex_error err = [&](const std::string& what) { fail("line " + std::to_string(line) + ": " + what); };
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) { ++p; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t q = p;
      while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
      out.push_back({token::type::name, src.substr(p, q - p)});
      p = q;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      out.push_back(number_token(src, p, err));
      continue;
    }
    if (c == '\'' || c == '"') {
      out.push_back(string_token(src, p, err));
      continue;
    }
    static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "(", ")",
                                "[", "]", "{", "}", ",", ".", ":", "|", "="};
    bool found = false;
    for (const char* op : ops) {
      const std::size_t n = std::char_traits<char>::length(op);
      if (src.compare(p, n, op) == 0) {
        out.push_back({token::type::op, op});
        p += n;
        found = true;
        break;
      }
    }
    if (!found) err(std::string("unexpected character '") + c + "'");
  }
  out.push_back({token::type::end, ""});
  return out;
}

}  // namespace troupe::chat::jinja
