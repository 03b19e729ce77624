#include "runtime/engine/micro_batch.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace troupe::engine {

std::vector<micro_batch> split_plan(forward_plan p, int parts) {
  std::vector<micro_batch> out;
  const std::size_t T = p.tokens.size();
  if (T == 0) return out;
  if (parts <= 1) {
    micro_batch whole;
    whole.rows.resize(p.logit_rows.size());
    std::iota(whole.rows.begin(), whole.rows.end(), 0);
    whole.pools.resize(p.pools.size());
    std::iota(whole.pools.begin(), whole.pools.end(), 0);
    whole.plan = std::move(p);
    out.push_back(std::move(whole));
    return out;
  }
  // Where each sequence's run of tokens starts (a sequence's tokens are contiguous in a plan;
  // were they not, a cut would still fall only where the sequence changes).
  std::vector<std::size_t> starts{0};
  for (std::size_t t = 1; t < T; ++t)
    if (p.seq_of_token[t] != p.seq_of_token[t - 1]) starts.push_back(t);
  parts = std::max(1, std::min<int>(parts, int(starts.size())));
  // Greedy cuts at the sequence start nearest each k * T / parts.
  std::vector<std::size_t> cuts{0};
  for (int k = 1; k < parts; ++k) {
    const std::size_t want = T * std::size_t(k) / std::size_t(parts);
    auto it = std::lower_bound(starts.begin(), starts.end(), want);
    std::size_t c = it == starts.end() ? starts.back() : *it;
    if (it != starts.begin() && it != starts.end() && want - *(it - 1) < *it - want) c = *(it - 1);
    if (c > cuts.back()) cuts.push_back(c);
  }
  cuts.push_back(T);
  for (std::size_t m = 0; m + 1 < cuts.size(); ++m) {
    const std::size_t a = cuts[m], b = cuts[m + 1];
    micro_batch mb;
    std::map<std::int32_t, std::int32_t> seq_index;  // whole plan's sequence -> this one's
    for (std::size_t t = a; t < b; ++t) {
      const std::int32_t s = p.seq_of_token[t];
      auto [it, fresh] = seq_index.emplace(s, std::int32_t(mb.plan.tables.size()));
      if (fresh) {
        mb.plan.tables.push_back(p.tables[std::size_t(s)]);
        mb.plan.group_tables.resize(p.group_tables.size());
        for (std::size_t g = 0; g < p.group_tables.size(); ++g) mb.plan.group_tables[g].push_back(p.group_tables[g][std::size_t(s)]);
      }
      mb.plan.tokens.push_back(p.tokens[t]);
      mb.plan.positions.push_back(p.positions[t]);
      mb.plan.seq_of_token.push_back(it->second);
    }
    for (std::size_t r = 0; r < p.logit_rows.size(); ++r) {
      const auto row = std::size_t(p.logit_rows[r]);
      if (row < a || row >= b) continue;
      mb.plan.logit_rows.push_back(std::int32_t(row - a));
      mb.plan.sampling.push_back(p.sampling[r]);
      mb.rows.push_back(std::int32_t(r));
    }
    for (std::size_t k = 0; k < p.pools.size(); ++k) {  // a span lies within one sequence's run
      const auto first = std::size_t(p.pools[k].first);
      if (first < a || first >= b) continue;
      mb.plan.pools.push_back({std::int32_t(first - a), p.pools[k].count});
      mb.pools.push_back(std::int32_t(k));
    }
    out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace troupe::engine
