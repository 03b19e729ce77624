// A replica's KV blocks as one object: the block pool, the prefix cache over it, and each
// sequence's block table. The scheduler asks it for counts and allocations only; the engine
// never touches a block id except to put tables in a plan.
//
// Prefix caching: a full block whose KV has been computed is registered under its chained hash
// (block_hash.h). A new sequence looks its leading block hashes up and reuses the blocks found
// by reference count; it never writes them (its first new token always goes into a block of its
// own). A block whose last holder lets go returns to the free list but stays findable until the
// pool needs it: eviction is least recently freed first, and a sequence's blocks are freed tail
// first, so the head of a shared prefix is the last of it to go.
//
// Window groups (window_groups.h): the pool's blocks are pages. A sequence's table holds its
// global pages; each of its blocks also has one page per windowed group, held while the block is
// in the sequence's window (slide() gives them back as it moves on). A block's window pages stay
// with it when nobody holds them, in the free list like a cached block, so a prefix hit can use
// them; a hit is cut to the longest prefix whose last window still has its pages.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv/block_hash.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/kv_events.h"

namespace troupe::kv {

using seq_id = std::uint64_t;

struct kv_manager_config {
  int num_blocks = 0;
  int block_size = 16;
  bool prefix_caching = true;
  // Offer the cached blocks nobody holds any more to a KV store (take_offloads).
  bool offload = false;
  // Record what is stored and removed for take_events. Off where nobody subscribes (the cluster
  // simulator): a stored event copies its blocks' token ids.
  bool events = true;
  // Window groups: how many (0: none; every count below is then of blocks) and the widest window.
  int window_groups = 0;
  int window = 0;
};

// A cached block to copy to a KV store, pinned (not evictable) until unpin().
struct offload_block {
  block_id block;
  block_hash hash = 0;
  block_hash parent = 0;
  bool has_parent = false;
  std::vector<std::int32_t> tokens;  // block_size of them
};

// What a lookup found: the leading blocks already computed, and how many of them sit in the
// free list (taking them costs free blocks).
struct prefix_hit {
  std::vector<block_id> blocks;
  int evictable = 0;
  int tokens(int block_size) const { return int(blocks.size()) * block_size; }
};

struct prefix_stats {
  std::uint64_t queries = 0;  // tokens looked up (vLLM's prefix_cache_queries)
  std::uint64_t hits = 0;     // tokens found
};

class kv_cache_manager {
 public:
  explicit kv_cache_manager(kv_manager_config cfg);

  const kv_manager_config& config() const { return cfg_; }
  int block_size() const { return cfg_.block_size; }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free() const { return pool_.num_free(); }  // includes cached blocks (and pages) nobody holds
  int num_used() const { return pool_.num_used(); }
  int num_cached() const { return int(by_hash_.size()); }
  const block_pool& pool() const { return pool_; }

  const std::vector<block_id>& table(seq_id s) const;
  // The same as raw ids, as block tables travel in a forward_plan and to the kernels.
  std::vector<std::int32_t> raw_table(seq_id s) const;
  int num_blocks_of(seq_id s) const;
  // Pages of `s` no other sequence holds (what freeing it gives back).
  int num_exclusive(seq_id s) const;
  // Pages a block costs when allocated: its global one and one per window group.
  int pages_per_block() const { return 1 + cfg_.window_groups; }
  // Appends to tables[g - 1], for each window group g, the pages of that group of each block of
  // `s` (-1 for blocks out of its window): a plan's group tables, one walk of the table.
  void append_group_tables(seq_id s, std::vector<std::vector<std::vector<std::int32_t>>>& tables) const;
  // Window pages some sequence holds (the pages of blocks in a window).
  int num_window_pages_held() const { return window_pages_held_; }

  // The longest run of leading `hashes` that is cached, capped at `max_blocks`. Counts in no
  // statistic: a waiting sequence is looked up every step until it is admitted.
  prefix_hit find_prefix(std::span<const block_hash> hashes, int max_blocks) const;
  // find_prefix's blocks().size() without building the hit: what a router weighs every replica
  // by on every request.
  int prefix_length(std::span<const block_hash> hashes, int max_blocks) const;
  // Starts sequence `s`'s table with a hit found in this same step (nothing changed since).
  void attach_prefix(seq_id s, const prefix_hit& hit);
  // Records one admission's lookup: `query` tokens asked, `hit` tokens found.
  void count_lookup(int query_tokens, int hit_tokens);

  // Appends `n` fresh blocks to `s`'s table (n * pages_per_block() pages), evicting the least
  // recently freed cached blocks if it must. False (and nothing taken) if too few are free.
  bool allocate(seq_id s, int n);

  // `s` has computed (and kept) its first `computed` positions: its blocks out of the window of
  // the next one give back their window pages. Without window groups, nothing.
  void slide(seq_id s, int computed);

  // Registers `s`'s full blocks whose KV is now computed: block i under hashes[i], for i below
  // `full_blocks`. A hash cached already (another copy of the same prefix) leaves this block
  // uncached.
  void cache_blocks(seq_id s, std::span<const block_hash> hashes, std::span<const std::int32_t> tokens, int full_blocks);

  // Drops `s`'s table: its blocks go back, tail first; cached ones stay findable until evicted.
  void free(seq_id s);
  // Gives back `s`'s blocks past its first `keep` (what a verify step wrote for proposals it
  // rejected), tail first. They were never registered: cache_blocks takes only blocks whose
  // every position is computed and kept, and `keep` must cover those.
  void truncate(seq_id s, int keep);

  // Forgets every cached hash (the KV tensors were lost or reset). Tables stay; the blocks they
  // hold are no longer findable.
  void clear_cache();

  const prefix_stats& stats() const { return stats_; }

  // With offload on: the cached blocks whose last holder let go since the last call and that are
  // still cached and free, each pinned so the pool cannot hand it out until unpin(). A store
  // copies them between steps (write-behind); a block taken again by a hit meanwhile is skipped
  // (it is offered again when it is let go of again).
  std::vector<offload_block> take_offloads();
  void unpin(const std::vector<block_id>& blocks);

  // The events since the last call, oldest first.
  std::vector<kv_event> take_events();
  // Every hash cached now (a receiver that lost events rebuilds its view from this).
  std::vector<block_hash> cached_hashes() const;

 private:
  void evict(block_id b);
  void forget_window(block_id b);
  void hold_window(block_id b);
  void release_window(block_id b);
  int window_cut(const std::vector<block_id>& blocks) const;
  void release_windows(seq_id s, int from_block);

  kv_manager_config cfg_;
  block_pool pool_;
  std::map<seq_id, std::vector<block_id>> tables_;
  std::unordered_map<block_hash, block_id> by_hash_;
  std::vector<block_hash> hash_of_;  // per block; meaningful where cached_[b]
  std::vector<bool> cached_;
  std::map<seq_id, int> registered_;  // per sequence: leading blocks already registered or hit
  // Offload (cfg_.offload): each cached block's parent and tokens, and the blocks let go of.
  std::vector<block_hash> parent_of_;
  std::vector<bool> has_parent_;
  std::vector<std::int32_t> tokens_of_;  // block_size per block
  std::vector<block_id> let_go_;
  prefix_stats stats_;
  std::vector<kv_event> events_;
  // Window groups: each global page's window pages (empty: none), the sequences holding them,
  // each window page's global page (-1: none), each sequence's first block it holds them for.
  std::vector<std::vector<block_id>> window_of_;
  std::vector<int> window_holders_;
  std::vector<std::int32_t> owner_;
  std::map<seq_id, int> window_from_;
  int window_pages_held_ = 0;
};

}  // namespace troupe::kv
