// GPT-2's reversible map between bytes and printable Unicode characters, used by byte-level BPE
// vocabularies (GPT-2, Llama 3, Qwen2): space is 'Ġ' (U+0120), newline 'Ċ' (U+010A), ...
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::tokenizer {

char32_t byte_to_char(std::uint8_t b);
// The byte a character stands for; false if it is not one of the 256 characters.
bool char_to_byte(char32_t c, std::uint8_t& b);

// UTF-8 text of the byte characters for `bytes`.
std::string bytes_to_symbols(std::string_view bytes);
// Inverse of bytes_to_symbols; characters outside the table pass through as UTF-8.
std::string symbols_to_bytes(std::string_view symbols);

}  // namespace troupe::tokenizer
