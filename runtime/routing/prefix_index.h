// The router's view of where each prefix lives: per replica, the block hashes its KV events say
// it holds, fenced by the replica's generation. Fed by kv::kv_event_batch (in order per replica,
// numbered); a replica whose stream has a gap, or whose first batches came before its snapshot,
// is marked incomplete until a snapshot (every hash it holds) resets it.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include "runtime/kv/kv_events.h"

namespace troupe::routing {

class prefix_index {
 public:
  enum class outcome { applied, stale, gap };

  // Applies one batch. stale: from an older generation (a replica's earlier life), ignored.
  // gap: a batch is missing (or no snapshot yet); the replica is incomplete and its hashes are
  // dropped until reset() is called with a snapshot.
  outcome apply(const kv::kv_event_batch& b);

  // A snapshot: replica `r` holds exactly `hashes` after its batch `seq` of `generation`.
  // Ignored if older than what the index has.
  void reset(replica_id r, std::uint64_t generation, std::uint64_t seq, std::span<const kv::block_hash> hashes);

  // The replica is gone (dead, or re-registering): it holds nothing until its next snapshot.
  void drop(replica_id r);

  // The router just placed a request with these blocks on `r`: count them as held until the
  // replica's events catch up (a burst with one prefix then follows its first request). A
  // prediction never confirmed lingers at most until the replica's next reset or until
  // max_predicted are pending, when all are forgotten.
  void predict(replica_id r, std::span<const kv::block_hash> hashes);
  static constexpr std::size_t max_predicted = 1 << 16;

  // How many of `hashes`, from the first, replica `r` holds (or is predicted to).
  int matched_blocks(replica_id r, std::span<const kv::block_hash> hashes) const;
  bool complete(replica_id r) const;
  // The dtype of `r`'s KV as its last batch said, or nothing before its first.
  std::optional<kernels::dtype> kv_type(replica_id r) const;
  // Whether blocks `from` holds can be pulled into `to`'s cache as far as their dtypes go: the
  // same dtype, or one of the two not known yet (the pull's layout check then decides).
  bool same_kv_type(replica_id from, replica_id to) const;
  // Blocks the index holds for `r` (its events' view, predictions not counted).
  std::size_t size(replica_id r) const;

 private:
  struct replica_view {
    std::uint64_t generation = 0;
    std::uint64_t seq = 0;  // the last batch applied
    bool complete = false;
    std::optional<kernels::dtype> kv_type;
    std::unordered_set<kv::block_hash> blocks;
    std::unordered_set<kv::block_hash> predicted;
  };
  std::map<replica_id, replica_view> replicas_;
};

}  // namespace troupe::routing
