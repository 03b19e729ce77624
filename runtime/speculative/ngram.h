// N-gram prompt lookup, the proposer that needs no model: a sequence that quotes itself (code
// edits, summaries, answers that repeat a passage of their prompt) is likely to go on as it did
// the last time its latest few tokens appeared. Pure: tokens in, proposed tokens out.
//
// Contract: ngram_proposal(tokens, c, k) looks for the last n tokens of `tokens` (n from c.max_n
// down to c.min_n, the longest match wins) at an earlier place in `tokens`, the most recent such
// place first, and proposes the up to k tokens that followed it there. No match: nothing.
// At most c.search_window tokens before the end are searched, so a call costs
// O(search_window * max_n) whatever the sequence's length.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::speculative {

struct ngram_config {
  int min_n = 2;                // shortest suffix matched
  int max_n = 4;                // longest suffix matched (tried first)
  int search_window = 4096;     // tokens before the end searched

  // Why this configuration cannot run, naming the field ("speculative.min_n: 0 is not in
  // 1..16"), or nothing. `where` prefixes the names (a TOML table).
  std::optional<std::string> invalid(const std::string& where = "speculative") const;
};

std::vector<std::int32_t> ngram_proposal(std::span<const std::int32_t> tokens, const ngram_config& c, int k);

}  // namespace troupe::speculative
