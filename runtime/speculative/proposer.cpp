#include "runtime/speculative/proposer.h"

namespace troupe::speculative {

std::vector<std::vector<std::int32_t>> ngram_proposer::propose(std::span<const proposal_ask> asks) {
  std::vector<std::vector<std::int32_t>> out;
  out.reserve(asks.size());
  for (const auto& a : asks) out.push_back(ngram_proposal(a.tokens, c_, a.k));
  return out;
}

}  // namespace troupe::speculative
