// Which KV pages a sliding-window layer keeps: only those of its window. The layers that attend
// to every position (group 0) set the page: one page holds one block of KV for as many layers as
// the model has global layers, one slot each. The windowed layers are dealt, in order, into
// groups 1..count of that many slots (the last group padded). Each group has a block table per
// sequence over one pool of pages, so a page id addresses the same bytes whichever group holds
// it: a global block costs one page for as long as the sequence lives, a windowed block `count`
// pages while it is in some sequence's window (kv_cache_manager), then they go back.
//
// This is vLLM's hybrid allocator in its simplest form: one page size, so one free list and one
// count the scheduler plans against, whatever the mix of groups. A model without global layers
// (every layer windowed) or without windowed ones is not split.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace troupe::kv {

struct window_groups {
  std::vector<std::int32_t> group;  // [layers]: 0 global; g > 0: windowed group g
  std::vector<std::int32_t> slot;   // [layers]: its slot in a page
  int count = 0;                    // windowed groups; 0: not split (group and slot empty)
  int window = 0;                   // the widest window of a windowed layer, in tokens

  bool split() const { return count > 0; }
  // Layer slots a page holds: the global layers', or every layer's when not split.
  int slots(int num_layers) const { return split() ? 1 + *std::max_element(slot.begin(), slot.end()) : num_layers; }
  // Pages a block of every group costs: the global one and one per windowed group.
  int pages_per_block() const { return 1 + count; }
};

// From each layer's window (0: global).
window_groups window_groups_of(const std::vector<int>& layer_windows);

// The first block a token at `position` attends to in a layer of `window` tokens (block_size
// tokens a block): blocks before it are out of that token's window, and of every later one's.
inline int first_block_in_window(int position, int window, int block_size) {
  const int first = position - window + 1;
  return first > 0 ? first / block_size : 0;
}

}  // namespace troupe::kv
