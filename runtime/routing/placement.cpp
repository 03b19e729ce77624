#include "runtime/routing/placement.h"

#include <algorithm>

namespace troupe::routing {

namespace {

replica_role role_of(const placement_context& c, replica_id r) {
  if (!c.roles) return replica_role::both;
  auto it = c.roles->find(r);
  return it == c.roles->end() ? replica_role::both : it->second;
}

bool disaggregated(const placement_context& c) { return c.roles && !c.roles->empty(); }

// Whether replica (or store) r serves the request's model: KV of one model is garbage to another.
bool serves(const placement_context& c, replica_id r, const placement_query& q) {
  if (!c.models) return true;
  auto it = c.models->find(r);
  return (it == c.models->end() ? std::string() : it->second) == q.model;
}

// Whether replica r is on the request's side of a canary split.
bool on_side(const placement_context& c, replica_id r, const placement_query& q) {
  if (!q.canary || !c.split || !c.revisions) return true;
  auto it = c.revisions->find(r);
  const bool canary = it != c.revisions->end() && it->second == c.split->key;
  return canary == *q.canary;
}

// Whether a new request's prompt goes to a prefill replica: one is live, and its queue is short
// enough next to what the best decode replica would have to compute of the prompt.
bool to_prefill_pool(const placement_context& c, const placement_query& q) {
  if (q.decode || !disaggregated(c)) return false;
  int queue = -1, cached = 0;
  for (const auto& l : c.loads) {
    if (!l.alive || l.replica == q.avoid || (c.held_back && c.held_back(l.replica)) || !serves(c, l.replica, q) || !on_side(c, l.replica, q))
      continue;
    if (role_of(c, l.replica) == replica_role::prefill)
      queue = queue < 0 ? l.waiting_prompt_tokens : std::min(queue, l.waiting_prompt_tokens);
    else if (c.kv_aware)
      cached = std::max(cached, c.index->matched_blocks(l.replica, q.hashes) * c.block_size);
  }
  return queue >= 0 && prefill_remotely(q.prompt_tokens - cached, queue, c.disaggregation);
}

// The loads as this request may use them: the replica it left, those of the wrong role and those
// held back are out; with a KV-aware policy each carries what the index says it holds.
std::vector<replica_load> eligible(const placement_context& c, const placement_query& q, bool prefill) {
  std::vector<replica_load> view(c.loads.begin(), c.loads.end());
  for (auto& l : view) {
    const auto role = role_of(c, l.replica);
    const bool fits = prefill ? role == replica_role::prefill : role != replica_role::prefill;
    if (l.replica == q.avoid || !fits || (c.held_back && c.held_back(l.replica)) || !serves(c, l.replica, q) || !on_side(c, l.replica, q))
      l.alive = false;
    if (c.kv_aware) {
      l.cached_blocks = c.index->matched_blocks(l.replica, q.hashes);
      l.index_complete = c.index->complete(l.replica);
    }
  }
  return view;
}

}  // namespace

std::vector<kv::block_hash> prompt_block_hashes(const std::vector<std::int32_t>& tokens, int block_size, kv::block_hash root,
                                                const std::string& cache_salt, int public_prefix) {
  std::vector<kv::block_hash> hashes;
  kv::extend_block_hashes(hashes, tokens, block_size, {root, kv::salt_key(cache_salt), public_prefix});
  if (!hashes.empty() && int(hashes.size()) * block_size >= int(tokens.size())) hashes.pop_back();
  return hashes;
}

namespace {

placement place_once(const placement_context& c, const placement_query& q) {
  placement out;
  out.prefill_only = to_prefill_pool(c, q);
  const bool avoiding = std::any_of(c.loads.begin(), c.loads.end(), [&](const replica_load& l) { return l.alive && l.replica == q.avoid; });
  // Copy the loads only when something limits where this request may go.
  const bool filtering = avoiding || disaggregated(c) || c.kv_aware || c.any_held_back || c.models || q.canary;
  const std::vector<replica_load> view = filtering ? eligible(c, q, out.prefill_only) : std::vector<replica_load>{};
  const decision d = (*c.choose)({0, q.prompt_tokens, q.priority, c.block_size}, filtering ? std::span<const replica_load>(view) : c.loads,
                                 *c.params, c.decision_index);
  out.why = d.why;
  out.reason = d.reason;
  if (!d.index) return out;
  const std::size_t i = *d.index;
  out.slot = i;
  out.cached_tokens = filtering ? std::min(view[i].cached_blocks * c.block_size, q.prompt_tokens) : 0;
  if (q.decode || c.stores.empty()) return out;
  int best = filtering && c.kv_aware ? view[i].cached_blocks : 0;
  for (replica_id store : c.stores) {
    const int m = c.index->matched_blocks(store, q.hashes);
    if (m > best && serves(c, store, q) && c.index->same_kv_type(store, c.loads[i].replica)) {
      best = m;
      out.store = store;
    }
  }
  if (out.store) out.store_blocks = best;
  return out;
}

}  // namespace

placement place(const placement_context& c, const placement_query& q) {
  if (!q.canary) return place_once(c, q);
  placement p = place_once(c, q);
  if (p.slot) return p;
  placement_query either = q;  // no replica of its side can take it: a split never refuses
  either.canary.reset();
  return place_once(c, either);
}

void count_placement(replica_load& l, int prompt_tokens, int cached_tokens) {
  l.running_seqs += 1;
  l.waiting_prompt_tokens += prompt_tokens - cached_tokens;
}

}  // namespace troupe::routing
