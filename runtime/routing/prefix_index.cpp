#include "runtime/routing/prefix_index.h"

namespace troupe::routing {

prefix_index::outcome prefix_index::apply(const kv::kv_event_batch& b) {
  auto it = replicas_.find(b.replica);
  if (it == replicas_.end()) {  // no snapshot yet: remember the generation, wait for one
    replica_view v;
    v.generation = b.generation;
    v.kv_type = b.kv_type;
    replicas_.emplace(b.replica, std::move(v));
    return outcome::gap;
  }
  replica_view& v = it->second;
  if (b.generation < v.generation) return outcome::stale;
  v.kv_type = b.kv_type;
  if (b.generation > v.generation) {  // restarted or reset: nothing of before counts
    v.generation = b.generation;
    v.blocks.clear();
    v.predicted.clear();
    v.complete = b.seq == 1;
    v.seq = 0;
    if (!v.complete) return outcome::gap;
  } else if (b.seq <= v.seq) {
    return outcome::stale;  // already in the snapshot
  } else if (!v.complete || b.seq != v.seq + 1) {
    v.complete = false;
    v.blocks.clear();
    return outcome::gap;
  }
  v.seq = b.seq;
  for (const auto& e : b.events) {
    switch (e.kind) {
      case kv::kv_event_kind::stored:
        v.blocks.insert(e.hashes.begin(), e.hashes.end());
        for (auto h : e.hashes) v.predicted.erase(h);
        break;
      case kv::kv_event_kind::removed:
        for (auto h : e.hashes) {
          v.blocks.erase(h);
          v.predicted.erase(h);
        }
        break;
      case kv::kv_event_kind::cleared:
        v.blocks.clear();
        v.predicted.clear();
        break;
    }
  }
  return outcome::applied;
}

void prefix_index::reset(replica_id r, std::uint64_t generation, std::uint64_t seq, std::span<const kv::block_hash> hashes) {
  replica_view& v = replicas_[r];
  if (generation < v.generation || (generation == v.generation && v.complete && seq < v.seq)) return;
  v.generation = generation;
  v.seq = seq;
  v.complete = true;
  v.blocks.clear();
  v.predicted.clear();
  v.blocks.insert(hashes.begin(), hashes.end());
}

void prefix_index::predict(replica_id r, std::span<const kv::block_hash> hashes) {
  auto it = replicas_.find(r);
  if (it == replicas_.end()) return;
  auto& p = it->second.predicted;
  if (p.size() + hashes.size() > max_predicted) p.clear();
  for (auto h : hashes)
    if (!it->second.blocks.count(h)) p.insert(h);
}

void prefix_index::drop(replica_id r) { replicas_.erase(r); }

int prefix_index::matched_blocks(replica_id r, std::span<const kv::block_hash> hashes) const {
  auto it = replicas_.find(r);
  if (it == replicas_.end()) return 0;
  int n = 0;
  for (auto h : hashes) {
    if (!it->second.blocks.count(h) && !it->second.predicted.count(h)) break;
    ++n;
  }
  return n;
}

std::size_t prefix_index::size(replica_id r) const {
  auto it = replicas_.find(r);
  return it == replicas_.end() ? 0 : it->second.blocks.size();
}

std::optional<kernels::dtype> prefix_index::kv_type(replica_id r) const {
  auto it = replicas_.find(r);
  return it == replicas_.end() ? std::nullopt : it->second.kv_type;
}

bool prefix_index::same_kv_type(replica_id from, replica_id to) const {
  const auto a = kv_type(from), b = kv_type(to);
  return !a || !b || *a == *b;
}

bool prefix_index::complete(replica_id r) const {
  auto it = replicas_.find(r);
  return it != replicas_.end() && it->second.complete;
}

}  // namespace troupe::routing
