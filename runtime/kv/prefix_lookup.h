// One step's prefix-cache lookups for the sequences waiting to be admitted, as the engine's plan
// asks for them:
// - what the prefix cache holds of each (counted as computed; its free blocks cost free blocks);
// - the "computing" dedup: a waiting sequence whose next block a running prefill (or one
//   admitted ahead of it) is computing waits for that block to be cached rather than compute the
//   same prefix twice. It is the one exception to "no overtaking": it waits on another
//   sequence's progress, not for room;
// - the pull trimming: of KV a sequence is to pull (connector.h), what this replica caches
//   already is not pulled again.
// Bounded: a step admits at most max_num_seqs sequences, so no more than that are looked up.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <unordered_set>

#include "runtime/kv/kv_cache_manager.h"

namespace troupe::kv {

class prefix_lookup {
 public:
  prefix_lookup(const kv_cache_manager& kv, int max_lookups) : kv_(kv), budget_(max_lookups > 0 ? max_lookups : 1) {}

  // Whether the step's budget allows another lookup: ask before hashing a prompt for one.
  bool can_look() const { return budget_ > 0; }

  // A running prefill computes `hashes` from block `from_block` on this step.
  void computing(std::span<const block_hash> hashes, int from_block);

  struct answer {
    bool looked = false;  // false: over the step's budget, looked up next step
    bool wait = false;    // its next block is being computed: not a candidate this step
    int tokens = 0;       // found: count as computed
    int blocks = 0;
    int evictable = 0;    // of them, in the free list
  };
  // A waiting sequence holding nothing, with `tokens` tokens of which the first `prompt_len` are
  // its prompt. At least its last token is always computed (its logits are needed, and a shared
  // block is never written). If admitted, the blocks of its prompt it computes are `computing`
  // for those behind it.
  answer fresh(seq_id s, std::span<const block_hash> hashes, int tokens, int prompt_len);
  // A waiting sequence with `positions` of KV to pull: the leading blocks of it cached here.
  answer to_pull(seq_id s, std::span<const block_hash> hashes, int positions);

  // `s` was admitted: what was found for it joins its table (before any allocation of the step,
  // as those may evict), and the lookup counts `query_tokens` asked. Blocks and tokens attached.
  struct attached {
    bool found = false;  // it was looked up and not told to wait (found may be nothing)
    int blocks = 0;
    int tokens = 0;
  };
  attached attach(kv_cache_manager& kv, seq_id s, int query_tokens) const;

 private:
  const kv_cache_manager& kv_;
  int budget_;
  std::unordered_set<block_hash> computing_;
  std::map<seq_id, prefix_hit> hits_;
};

}  // namespace troupe::kv
