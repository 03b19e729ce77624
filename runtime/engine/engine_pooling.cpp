// Embedding requests in the engine's steps (request::embed): they run with the generating ones,
// chunked and preempted like any prompt, and end once their prompt is computed. The positions to
// pool come from the model's pooling config; each is pooled once even if a preemption or a lost
// step makes its KV be computed again (the hidden states of a position do not change).
#include <algorithm>

#include "runtime/engine/engine.h"
#include "runtime/engine/engine_sequence.h"

namespace troupe::engine {

void engine::add_pool_rows(const sequence& s, int new_tokens, forward_plan& fp, pending& p) const {
  int span = -1, to = s.pooled;
  if (s.embed) {
    const auto want = model::positions_to_pool(*mc_.pooling, s.prompt_len);
    const int lo = std::max({s.num_computed, s.pooled, want.first});
    const int hi = std::min(s.num_computed + new_tokens, want.first + want.count);
    if (lo < hi) {
      const int first = int(fp.tokens.size()) - p.new_tokens.back();  // fp's row of position num_computed
      span = int(fp.pools.size());
      fp.pools.push_back({std::int32_t(first + lo - s.num_computed), std::int32_t(hi - lo)});
      to = hi;
    }
  }
  p.pool_span.push_back(span);
  p.pooled_to.push_back(to);
}

void engine::take_pooled(sequence& s, const step_result& r, const pending& p, std::size_t i) const {
  if (p.pool_span[i] < 0) return;
  const auto& v = r.pooled[std::size_t(p.pool_span[i])];
  if (v.size() != std::size_t(mc_.hidden_size))
    throw std::logic_error("take_pooled: a pooled vector of " + std::to_string(v.size()) + " values, the model's hidden size is " +
                           std::to_string(mc_.hidden_size));
  s.pool_sum.resize(v.size(), 0.0);
  for (std::size_t d = 0; d < v.size(); ++d) s.pool_sum[d] += v[d];
  s.pooled = p.pooled_to[i];
}

request_output engine::embedding_output(const sequence& s) const {
  request_output o;
  o.id = s.name;
  const auto want = model::positions_to_pool(*mc_.pooling, s.prompt_len);
  o.embedding = model::finish_embedding(*mc_.pooling, s.pool_sum, want.count);
  return o;
}

}  // namespace troupe::engine
