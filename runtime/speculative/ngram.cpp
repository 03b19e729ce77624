#include "runtime/speculative/ngram.h"

#include <algorithm>

namespace troupe::speculative {

namespace {

constexpr int max_n_cap = 16;

}  // namespace

std::optional<std::string> ngram_config::invalid(const std::string& where) const {
  auto range = [&](const char* field, int v, int lo, int hi) -> std::optional<std::string> {
    if (v >= lo && v <= hi) return std::nullopt;
    return where + "." + field + ": " + std::to_string(v) + " is not in " + std::to_string(lo) + ".." + std::to_string(hi);
  };
  if (auto e = range("min_n", min_n, 1, max_n_cap)) return e;
  if (auto e = range("max_n", max_n, 1, max_n_cap)) return e;
  if (min_n > max_n) return where + ".min_n: " + std::to_string(min_n) + " is above max_n (" + std::to_string(max_n) + ")";
  if (search_window < max_n + 1) return where + ".search_window: " + std::to_string(search_window) + " is shorter than max_n + 1";
  return std::nullopt;
}

std::vector<std::int32_t> ngram_proposal(std::span<const std::int32_t> tokens, const ngram_config& c, int k) {
  if (k <= 0) return {};
  const std::size_t len = tokens.size();
  const std::size_t from = len > std::size_t(c.search_window) ? len - std::size_t(c.search_window) : 0;
  for (int n = std::min<int>(c.max_n, int(len) - 1); n >= c.min_n; --n) {
    const auto suffix = tokens.subspan(len - std::size_t(n));
    // An earlier occurrence starts at s < len - n, so at least one token follows it; the most
    // recent first (what the text did last is the likelier continuation).
    for (std::size_t s = len - std::size_t(n); s-- > from;) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + std::ptrdiff_t(s))) continue;
      const std::size_t next = s + std::size_t(n);
      const std::size_t take = std::min<std::size_t>(std::size_t(k), len - next);
      return {tokens.begin() + std::ptrdiff_t(next), tokens.begin() + std::ptrdiff_t(next + take)};
    }
  }
  return {};
}

}  // namespace troupe::speculative
