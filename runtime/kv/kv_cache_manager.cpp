#include "runtime/kv/kv_cache_manager.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/kv/window_groups.h"

namespace troupe::kv {

kv_cache_manager::kv_cache_manager(kv_manager_config cfg)
    : cfg_(cfg), pool_(cfg.num_blocks), hash_of_(std::size_t(cfg.num_blocks), 0), cached_(std::size_t(cfg.num_blocks), false) {
  if (cfg_.offload) {
    parent_of_.assign(std::size_t(cfg.num_blocks), 0);
    has_parent_.assign(std::size_t(cfg.num_blocks), false);
    tokens_of_.assign(std::size_t(cfg.num_blocks) * std::size_t(cfg.block_size), 0);
  }
  if (cfg_.window_groups > 0) {
    // A store copies global pages only; a windowed block's other pages would not travel.
    if (cfg_.offload) throw std::logic_error("kv_cache_manager: window groups with offload");
    window_of_.resize(std::size_t(cfg.num_blocks));
    window_holders_.assign(std::size_t(cfg.num_blocks), 0);
    owner_.assign(std::size_t(cfg.num_blocks), -1);
  }
}

const std::vector<block_id>& kv_cache_manager::table(seq_id s) const {
  static const std::vector<block_id> none;
  auto it = tables_.find(s);
  return it == tables_.end() ? none : it->second;
}

std::vector<std::int32_t> kv_cache_manager::raw_table(seq_id s) const {
  std::vector<std::int32_t> out;
  for (block_id b : table(s)) out.push_back(b.value);
  return out;
}

int kv_cache_manager::num_blocks_of(seq_id s) const { return int(table(s).size()); }

int kv_cache_manager::num_exclusive(seq_id s) const {
  int n = 0;
  const auto& t = table(s);
  for (block_id b : t) n += pool_.ref_count(b) == 1 ? 1 : 0;
  if (cfg_.window_groups == 0) return n;
  auto from = window_from_.find(s);
  for (std::size_t j = from == window_from_.end() ? 0 : std::size_t(from->second); j < t.size(); ++j)
    n += window_holders_[std::size_t(t[j].value)] == 1 ? cfg_.window_groups : 0;
  return n;
}

void kv_cache_manager::append_group_tables(seq_id s, std::vector<std::vector<std::vector<std::int32_t>>>& tables) const {
  if (cfg_.window_groups == 0) return;
  tables.resize(std::size_t(cfg_.window_groups));
  const auto& t = table(s);
  for (auto& g : tables) g.emplace_back(t.size(), -1);
  auto f = window_from_.find(s);
  for (std::size_t j = f == window_from_.end() ? 0 : std::size_t(f->second); j < t.size(); ++j) {
    const auto& w = window_of_[std::size_t(t[j].value)];
    for (std::size_t g = 0; g < w.size(); ++g) tables[g].back()[j] = w[g].value;
  }
}

// The longest leading run of `blocks` (a prefix hit) whose last window has its pages: the next
// token, at the hit's end, attends to those.
int kv_cache_manager::window_cut(const std::vector<block_id>& blocks) const {
  int k = int(blocks.size());
  for (; k > 0; --k) {
    const int from = first_block_in_window(k * cfg_.block_size, cfg_.window, cfg_.block_size);
    bool whole = true;
    for (int j = from; j < k && whole; ++j) whole = !window_of_[std::size_t(blocks[std::size_t(j)].value)].empty();
    if (whole) break;
  }
  return k;
}

prefix_hit kv_cache_manager::find_prefix(std::span<const block_hash> hashes, int max_blocks) const {
  prefix_hit hit;
  if (!cfg_.prefix_caching) return hit;
  const std::size_t n = std::min(hashes.size(), std::size_t(std::max(max_blocks, 0)));
  for (std::size_t i = 0; i < n; ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) break;
    hit.blocks.push_back(it->second);
  }
  if (cfg_.window_groups > 0) hit.blocks.resize(std::size_t(window_cut(hit.blocks)));
  const int k = int(hit.blocks.size());
  for (block_id b : hit.blocks) hit.evictable += pool_.ref_count(b) == 0 ? 1 : 0;
  if (cfg_.window_groups > 0)  // the window pages it takes from the free list
    for (int j = first_block_in_window(k * cfg_.block_size, cfg_.window, cfg_.block_size); j < k; ++j)
      hit.evictable += window_holders_[std::size_t(hit.blocks[std::size_t(j)].value)] == 0 ? cfg_.window_groups : 0;
  return hit;
}

int kv_cache_manager::prefix_length(std::span<const block_hash> hashes, int max_blocks) const {
  if (!cfg_.prefix_caching) return 0;
  if (cfg_.window_groups > 0) return int(find_prefix(hashes, max_blocks).blocks.size());  // cut where windows lost pages
  const std::size_t n = std::min(hashes.size(), std::size_t(std::max(max_blocks, 0)));
  std::size_t i = 0;
  while (i < n && by_hash_.count(hashes[i])) ++i;
  return int(i);
}

void kv_cache_manager::attach_prefix(seq_id s, const prefix_hit& hit) {
  auto& t = tables_[s];
  if (!t.empty()) throw std::logic_error("attach_prefix: the sequence already holds blocks");
  for (block_id b : hit.blocks) {
    if (pool_.ref_count(b) == 0)
      pool_.take(b);
    else
      pool_.share(b);
    t.push_back(b);
  }
  registered_[s] = int(hit.blocks.size());
  if (cfg_.window_groups == 0) return;
  const int k = int(t.size()), from = first_block_in_window(k * cfg_.block_size, cfg_.window, cfg_.block_size);
  window_from_[s] = from;
  for (int j = from; j < k; ++j) hold_window(t[std::size_t(j)]);
}

void kv_cache_manager::forget_window(block_id b) {
  for (block_id p : window_of_[std::size_t(b.value)]) owner_[std::size_t(p.value)] = -1;
  window_of_[std::size_t(b.value)].clear();
}

void kv_cache_manager::hold_window(block_id b) {
  const auto& w = window_of_[std::size_t(b.value)];
  if (w.empty()) throw std::logic_error("kv_cache_manager: a block in a window has no window pages");
  if (window_holders_[std::size_t(b.value)]++ > 0) return;
  for (block_id p : w) pool_.take(p);
  window_pages_held_ += int(w.size());
}

void kv_cache_manager::release_window(block_id b) {
  if (--window_holders_[std::size_t(b.value)] > 0) return;
  const auto& w = window_of_[std::size_t(b.value)];
  pool_.release(w);  // idle but still this block's: a prefix hit may take them again
  window_pages_held_ -= int(w.size());
}

// `s` lets go of the window pages of its blocks from `from_block` on, tail first.
void kv_cache_manager::release_windows(seq_id s, int from_block) {
  if (cfg_.window_groups == 0) return;
  auto f = window_from_.find(s);
  auto t = tables_.find(s);
  if (f == window_from_.end() || t == tables_.end()) return;
  for (int j = int(t->second.size()) - 1; j >= std::max(f->second, from_block); --j) release_window(t->second[std::size_t(j)]);
}

void kv_cache_manager::slide(seq_id s, int computed) {
  if (cfg_.window_groups == 0) return;
  auto t = tables_.find(s);
  if (t == tables_.end()) return;
  int& from = window_from_[s];
  const int next = std::min(first_block_in_window(computed, cfg_.window, cfg_.block_size), int(t->second.size()));
  for (; from < next; ++from) release_window(t->second[std::size_t(from)]);
}

void kv_cache_manager::count_lookup(int query_tokens, int hit_tokens) {
  stats_.queries += std::uint64_t(std::max(query_tokens, 0));
  stats_.hits += std::uint64_t(std::max(hit_tokens, 0));
}

void kv_cache_manager::evict(block_id b) {
  if (!cached_[std::size_t(b.value)]) return;
  cached_[std::size_t(b.value)] = false;
  const block_hash h = hash_of_[std::size_t(b.value)];
  by_hash_.erase(h);
  if (!cfg_.events) return;
  if (events_.empty() || events_.back().kind != kv_event_kind::removed) events_.push_back({kv_event_kind::removed});
  events_.back().hashes.push_back(h);
}

bool kv_cache_manager::allocate(seq_id s, int n) {
  if (n <= 0) return n == 0;
  const int per = pages_per_block();
  auto fresh = pool_.allocate(n * per);
  if (int(fresh.size()) != n * per) return false;
  for (block_id b : fresh) {
    evict(b);
    if (per == 1) continue;  // a page reused: whatever block it served (or whose window it was) forgets it
    if (owner_[std::size_t(b.value)] >= 0) forget_window(block_id{owner_[std::size_t(b.value)]});
    if (!window_of_[std::size_t(b.value)].empty()) forget_window(b);
  }
  auto& t = tables_[s];
  if (per > 1) window_from_.emplace(s, 0);
  for (int i = 0; i < n; ++i) {
    const block_id b = fresh[std::size_t(i * per)];
    t.push_back(b);
    if (per == 1) continue;
    auto& w = window_of_[std::size_t(b.value)];
    w.assign(fresh.begin() + i * per + 1, fresh.begin() + (i + 1) * per);
    for (block_id p : w) owner_[std::size_t(p.value)] = b.value;
    window_holders_[std::size_t(b.value)] = 1;
    window_pages_held_ += per - 1;
  }
  return true;
}

void kv_cache_manager::cache_blocks(seq_id s, std::span<const block_hash> hashes, std::span<const std::int32_t> tokens,
                                    int full_blocks) {
  if (!cfg_.prefix_caching) return;
  auto it = tables_.find(s);
  if (it == tables_.end()) return;
  const auto& t = it->second;
  int& done = registered_[s];
  const int upto = std::min({full_blocks, int(hashes.size()), int(t.size())});
  kv_event* ev = nullptr;
  for (int i = done; i < upto; ++i) {
    const block_hash h = hashes[std::size_t(i)];
    const block_id b = t[std::size_t(i)];
    if (by_hash_.count(h) || cached_[std::size_t(b.value)]) {  // another copy holds this prefix
      ev = nullptr;
      continue;
    }
    by_hash_[h] = b;
    hash_of_[std::size_t(b.value)] = h;
    cached_[std::size_t(b.value)] = true;
    if (cfg_.offload) {
      parent_of_[std::size_t(b.value)] = i > 0 ? hashes[std::size_t(i) - 1] : 0;
      has_parent_[std::size_t(b.value)] = i > 0;
      std::copy_n(tokens.begin() + std::ptrdiff_t(i) * cfg_.block_size, cfg_.block_size,
                  tokens_of_.begin() + std::ptrdiff_t(b.value) * cfg_.block_size);
    }
    if (!cfg_.events) continue;
    if (!ev) {
      events_.push_back({kv_event_kind::stored});
      ev = &events_.back();
      ev->has_parent = i > 0;
      ev->parent = i > 0 ? hashes[std::size_t(i) - 1] : 0;
      ev->block_size = cfg_.block_size;
    }
    ev->hashes.push_back(h);
    const auto first = tokens.begin() + std::ptrdiff_t(i) * cfg_.block_size;
    ev->token_ids.insert(ev->token_ids.end(), first, first + cfg_.block_size);
  }
  done = std::max(done, upto);
}

void kv_cache_manager::free(seq_id s) {
  auto it = tables_.find(s);
  if (it == tables_.end()) return;
  release_windows(s, 0);
  window_from_.erase(s);
  std::vector<block_id> tail_first(it->second.rbegin(), it->second.rend());
  pool_.release(tail_first);
  if (cfg_.offload)
    for (block_id b : tail_first)
      if (pool_.ref_count(b) == 0 && cached_[std::size_t(b.value)]) let_go_.push_back(b);
  tables_.erase(it);
  registered_.erase(s);
}

void kv_cache_manager::truncate(seq_id s, int keep) {
  auto it = tables_.find(s);
  if (it == tables_.end() || int(it->second.size()) <= keep) return;
  if (auto r = registered_.find(s); r != registered_.end() && keep < r->second)
    throw std::logic_error("kv_cache_manager::truncate: would drop a registered block");
  release_windows(s, keep);
  auto& t = it->second;
  std::vector<block_id> tail_first(t.rbegin(), t.rend() - keep);
  pool_.release(tail_first);
  t.resize(std::size_t(keep));
}

void kv_cache_manager::clear_cache() {
  const bool any = !by_hash_.empty();
  by_hash_.clear();
  std::fill(cached_.begin(), cached_.end(), false);
  for (auto& [s, n] : registered_) n = 0;
  let_go_.clear();
  if (cfg_.events && (any || cfg_.prefix_caching)) events_.push_back({kv_event_kind::cleared});
}

std::vector<offload_block> kv_cache_manager::take_offloads() {
  std::vector<offload_block> out;
  for (block_id b : let_go_) {
    const auto i = std::size_t(b.value);
    if (!cached_[i] || pool_.ref_count(b) != 0) continue;  // evicted, or held again (or offered twice)
    pool_.take(b);
    offload_block o{b, hash_of_[i], parent_of_[i], has_parent_[i], {}};
    o.tokens.assign(tokens_of_.begin() + std::ptrdiff_t(i * std::size_t(cfg_.block_size)),
                    tokens_of_.begin() + std::ptrdiff_t((i + 1) * std::size_t(cfg_.block_size)));
    out.push_back(std::move(o));
  }
  let_go_.clear();
  return out;
}

void kv_cache_manager::unpin(const std::vector<block_id>& blocks) { pool_.release(blocks); }

std::vector<kv_event> kv_cache_manager::take_events() {
  std::vector<kv_event> out;
  out.swap(events_);
  return out;
}

std::vector<block_hash> kv_cache_manager::cached_hashes() const {
  std::vector<block_hash> out;
  out.reserve(by_hash_.size());
  for (auto& [h, b] : by_hash_) out.push_back(h);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe::kv
