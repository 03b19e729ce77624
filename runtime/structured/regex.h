// Regular expressions as byte automata, for `guided_regex` and the string patterns of JSON
// Schema: a pattern compiles once into a DFA over bytes whose states the token trie
// (token_trie.h) turns into token masks. Written here because no packaged grammar engine fits
// (see token_trie.h); std::regex matches strings but exposes no automaton to step.
//
// Contract: compile_regex(pattern, budget) accepts the syntax JSON Schema's `pattern` and
// OpenAI's clients use: literals (any UTF-8), `.` (any character but a newline), classes
// `[a-z_]` and `[^...]` (ASCII members), escapes \d \w \s \D \W \S and \n \t \r \f \v \0 \xHH and
// escaped punctuation, groups `(...)` and `(?:...)`, alternation, `* + ?` and `{n} {n,} {n,m}`
// (a lazy `?` after them is accepted: the language is the same), and `^`/`$` at the pattern's
// ends. The whole output must match (the pattern is anchored at both ends). Anything else
// (backreferences, lookaround, named groups, non-ASCII class members) is refused with an
// input_error naming it and its offset; so is a pattern whose automaton would pass the budget.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace troupe::structured {

struct regex_budget {
  int max_nfa_states = 100000;  // {n,m} copies its operand: a{1000}{1000} stops here
  int max_dfa_states = 20000;   // subset construction can blow up exponentially
  int max_depth = 100;          // nested groups
  // Building the DFA: NFA states examined (each state of a DFA state once per byte, each member
  // of a closure once) before a bomb is refused. Counted, not timed: a clock made the same
  // schema compile on an idle machine and fail on a loaded one (a sanitizer build under load
  // refused a URL pattern that takes milliseconds). About a second of one core at -O3.
  std::uint64_t max_work = 300'000'000;
};

// A deterministic automaton over bytes: state s on byte b goes to next[s * 256 + b], -1 refused.
struct byte_dfa {
  std::vector<std::int32_t> next;
  std::vector<bool> accepting;
  int start = 0;

  int states() const { return int(accepting.size()); }
  std::optional<int> step(int s, unsigned char b) const {
    const std::int32_t n = next[std::size_t(s) * 256 + b];
    return n < 0 ? std::nullopt : std::optional<int>(n);
  }
  bool matches(std::string_view text) const;  // the whole text, from start
};

byte_dfa compile_regex(std::string_view pattern, const regex_budget& budget = {});

}  // namespace troupe::structured
