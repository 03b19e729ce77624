// A small backtracking regex engine for the pre-tokenizer patterns of tokenizer.json files
// (written for Oniguruma): alternation, groups, (?i:...), (?!...), (?=...), classes with
// \p{L} \p{N} \s and ranges, greedy and lazy quantifiers. Leftmost-first, like Oniguruma.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::tokenizer {

class regex {
 public:
  // Throws input_error naming the position and the construct for anything unsupported.
  explicit regex(std::string_view pattern);
  ~regex();
  regex(regex&&) noexcept;
  regex& operator=(regex&&) noexcept;

  // Leftmost match starting at or after `from`; false if none. A match may be empty.
  bool search(const std::u32string& s, std::size_t from, std::size_t& begin, std::size_t& end) const;

  struct node;

 private:
  std::unique_ptr<node> root_;
};

}  // namespace troupe::tokenizer
