#include "runtime/routing/replica_registry.h"

#include <algorithm>

namespace troupe::routing {

replica_registry::replica_registry(const std::set<std::uint32_t>& parked) {
  for (auto r : parked) parked_.insert(replica_id(r));
}

std::optional<std::size_t> replica_registry::slot(replica_id r) const {
  for (std::size_t i = 0; i < loads_.size(); ++i)
    if (loads_[i].replica == r) return i;
  return std::nullopt;
}

std::size_t replica_registry::enroll(replica_id r) {
  auto i = slot(r);
  if (!i) {
    loads_.push_back({});
    i = loads_.size() - 1;
  }
  loads_[*i] = {r, true, 0, 0, 0, 0};
  draining_.erase(r);
  reported_draining_.erase(r);
  stopped_.erase(r);
  suspects_.erase(r);
  ++registrations_[r];
  return *i;
}

void replica_registry::heard(replica_id r, clock::time_point now) {
  heard_at_[r] = now;
}

std::vector<std::pair<replica_id, bool>> replica_registry::judge(clock::time_point now, clock::duration after) {
  std::vector<std::pair<replica_id, bool>> changed;
  for (const auto& l : loads_) {
    if (!l.alive) continue;
    const auto at = heard_at_.find(l.replica);
    if (at == heard_at_.end()) continue;  // not heard from since it registered: its first report decides
    const bool silent = now - at->second > after;
    if (silent == (suspects_.count(l.replica) > 0)) continue;
    if (silent)
      suspects_.insert(l.replica);
    else
      suspects_.erase(l.replica);
    changed.emplace_back(l.replica, silent);
  }
  return changed;
}

std::optional<std::size_t> replica_registry::retire(replica_id r) {
  const auto i = slot(r);
  if (!i || !registrations_.count(r)) return std::nullopt;  // alive, or its end seen first
  loads_[*i].alive = false;
  draining_.erase(r);
  suspects_.erase(r);
  heard_at_.erase(r);
  stopped_.insert(r);
  return i;
}

void replica_registry::drain(replica_id r, clock::time_point now) {
  draining_.insert(r);
  told_at_[r] = now;
}

bool replica_registry::resume(replica_id r, clock::time_point now) {
  draining_.erase(r);
  reported_draining_.erase(r);
  told_at_[r] = now;
  return parked_.erase(r) > 0;
}

bool replica_registry::park(replica_id r, clock::time_point now) {
  draining_.erase(r);
  told_at_[r] = now;
  return parked_.insert(r).second;
}

bool replica_registry::told_lately(replica_id r, clock::time_point now) const {
  auto told = told_at_.find(r);
  return told != told_at_.end() && now - told->second < std::chrono::seconds(1);
}

std::optional<bool> replica_registry::report(replica_id r, const replica_report& rep, clock::time_point now) {
  if (!rep.draining)
    reported_draining_.erase(r);
  else if (!reported_draining_.count(r) && !told_lately(r, now))
    reported_draining_.insert(r);
  std::optional<bool> parked_changed;
  if (rep.parked != (parked_.count(r) > 0) && !told_lately(r, now)) {
    if (rep.parked)
      parked_.insert(r);
    else
      parked_.erase(r);
    parked_changed = rep.parked;
  }
  for (auto& l : loads_)
    if (l.replica == r && l.alive) {
      l.running_seqs = rep.running_seqs;
      l.waiting_prompt_tokens = rep.waiting_prompt_tokens;
      l.free_blocks = rep.total_blocks - rep.used_blocks;
      l.total_blocks = rep.total_blocks;
    }
  return parked_changed;
}

void replica_registry::progress(replica_id r, int prompt_tokens, bool finished) {
  for (auto& l : loads_)
    if (l.replica == r && l.alive) {
      l.waiting_prompt_tokens = std::max(0, l.waiting_prompt_tokens - prompt_tokens);
      if (finished) l.running_seqs = std::max(0, l.running_seqs - 1);
    }
}

std::uint32_t replica_registry::placeable() const {
  std::uint32_t n = 0;
  for (const auto& l : loads_) n += l.alive && !held_back(l.replica) ? 1 : 0;
  return n;
}

std::uint32_t replica_registry::generation(replica_id r) const {
  auto it = registrations_.find(r);
  return it == registrations_.end() ? 0 : it->second;
}

}  // namespace troupe::routing
