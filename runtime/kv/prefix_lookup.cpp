#include "runtime/kv/prefix_lookup.h"

namespace troupe::kv {

void prefix_lookup::computing(std::span<const block_hash> hashes, int from_block) {
  for (std::size_t i = std::size_t(from_block); i < hashes.size(); ++i) computing_.insert(hashes[i]);
}

prefix_lookup::answer prefix_lookup::fresh(seq_id s, std::span<const block_hash> hashes, int tokens, int prompt_len) {
  answer a;
  if (budget_ == 0) return a;
  --budget_;
  a.looked = true;
  const int bs = kv_.block_size();
  prefix_hit hit = kv_.find_prefix(hashes, (tokens - 1) / bs);
  a.tokens = hit.tokens(bs);
  a.blocks = int(hit.blocks.size());
  a.evictable = hit.evictable;
  const std::size_t next = hit.blocks.size();
  const bool shares_more = next < hashes.size() && int(next + 1) * bs < tokens;
  if (shares_more && computing_.count(hashes[next])) {
    a.wait = true;
    return a;
  }
  hits_.emplace(s, std::move(hit));
  for (std::size_t i = next; i < hashes.size() && int(i + 1) * bs <= prompt_len; ++i) computing_.insert(hashes[i]);
  return a;
}

prefix_lookup::answer prefix_lookup::to_pull(seq_id s, std::span<const block_hash> hashes, int positions) {
  answer a;
  if (budget_ == 0) return a;
  --budget_;
  a.looked = true;
  prefix_hit hit = kv_.find_prefix(hashes, positions / kv_.block_size());
  a.blocks = int(hit.blocks.size());
  a.evictable = hit.evictable;
  if (!hit.blocks.empty()) hits_.emplace(s, std::move(hit));
  return a;
}

prefix_lookup::attached prefix_lookup::attach(kv_cache_manager& kv, seq_id s, int query_tokens) const {
  auto h = hits_.find(s);
  if (h == hits_.end()) return {};
  kv.attach_prefix(s, h->second);
  const attached a{true, int(h->second.blocks.size()), h->second.tokens(kv.block_size())};
  kv.count_lookup(query_tokens, a.tokens);
  return a;
}

}  // namespace troupe::kv
