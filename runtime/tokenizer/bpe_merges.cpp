#include "runtime/tokenizer/bpe_merges.h"

#include <functional>
#include <queue>

namespace troupe::tokenizer {

bpe_merges::bpe_merges(const std::vector<std::pair<std::string, std::string>>& pairs,
                       const std::unordered_map<std::string, std::int32_t>& vocab) {
  rules_.reserve(pairs.size());
  int rank = 0;
  for (const auto& [a, b] : pairs) {
    auto ia = vocab.find(a), ib = vocab.find(b), ab = vocab.find(a + b);
    if (ia != vocab.end() && ib != vocab.end() && ab != vocab.end()) rules_.emplace(key(ia->second, ib->second), rule{rank, ab->second});
    ++rank;
  }
}

void bpe_merges::merge_all(std::vector<std::int32_t>& sym) const {
  const int n = int(sym.size());
  if (n < 2) return;
  std::vector<int> prev(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) prev[std::size_t(i)] = i - 1, next[std::size_t(i)] = i + 1 < n ? i + 1 : -1;
  std::vector<bool> alive(static_cast<std::size_t>(n), true);
  struct candidate {
    int rank, pos;
    std::int32_t merged;
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<candidate>> heap;
  auto consider = [&](int left) {
    if (left < 0 || next[std::size_t(left)] < 0) return;
    auto it = rules_.find(key(sym[std::size_t(left)], sym[std::size_t(next[std::size_t(left)])]));
    if (it != rules_.end()) heap.push({it->second.rank, left, it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const candidate c = heap.top();
    heap.pop();
    const auto pos = std::size_t(c.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = std::size_t(next[pos]);
    auto it = rules_.find(key(sym[pos], sym[right]));
    if (it == rules_.end() || it->second.merged != c.merged) continue;  // the pair changed since
    sym[pos] = c.merged;
    alive[right] = false;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[std::size_t(next[pos])] = c.pos;
    consider(prev[pos]);
    consider(c.pos);
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < std::size_t(n); ++i)
    if (alive[i]) sym[w++] = sym[i];
  sym.resize(w);
}

}  // namespace troupe::tokenizer
