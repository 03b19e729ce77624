#include "runtime/tokenizer/byte_level.h"

#include <array>

#include "runtime/tokenizer/unicode.h"

namespace troupe::tokenizer {
namespace {

struct tables {
  std::array<char32_t, 256> to_char{};
  tables() {
    // Printable bytes map to themselves; the rest to U+0100 upwards, in byte order.
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[std::size_t(b)] = printable ? char32_t(b) : char32_t(next++);
    }
  }
};

const tables& t() {
  static const tables tab;
  return tab;
}

}  // namespace

char32_t byte_to_char(std::uint8_t b) { return t().to_char[b]; }

bool char_to_byte(char32_t c, std::uint8_t& b) {
  if (c < 256) {
    bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    if (!printable) return false;
    b = std::uint8_t(c);
    return true;
  }
  if (c >= 256 && c < 256 + 68) {
    for (int i = 0; i < 256; ++i)
      if (t().to_char[std::size_t(i)] == c) return b = std::uint8_t(i), true;
  }
  return false;
}

std::string bytes_to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8_append(out, byte_to_char(b));
  return out;
}

std::string symbols_to_bytes(std::string_view symbols) {
  std::string out;
  for (char32_t c : utf8_decode(symbols)) {
    std::uint8_t b;
    if (char_to_byte(c, b)) out.push_back(char(b));
    else utf8_append(out, c);
  }
  return out;
}

}  // namespace troupe::tokenizer
