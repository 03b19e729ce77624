// What a KV cache looks like, as two replicas must agree on it before one copies the other's
// blocks byte for byte: element type, tokens per block, layers and which rank holds which,
// KV heads, head size, and the model (id and revision) whose KV it is. Checked before any byte
// moves; a mismatch is refused with a message naming the field and both values.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/dtype.h"

namespace troupe::kv::transfer {

struct kv_layout {
  kernels::dtype type = kernels::dtype::f32;
  int block_size = 16;
  int num_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  std::string model_key;                    // "<model id>@<revision>" (engine_config::model_key)
  std::vector<std::pair<int, int>> ranks;   // layers [first, last) of each pipeline stage, in order
  // Each stage's KV heads are split evenly over this many tensor ranks (heads [t n/tp, (t+1) n/tp)
  // on rank t); a handle then has one source per (stage, tensor rank), stage by stage.
  int tensor_parallel = 1;

  // One block of one layer's K (or V), in bytes.
  std::size_t block_bytes() const {
    return std::size_t(block_size) * std::size_t(n_kv_heads) * kernels::kv_row_bytes(type, std::size_t(head_dim));
  }
  // The rank holding model layer `l`, or -1.
  int rank_of(int layer) const;
};

// Why `sender`'s blocks cannot be copied into `receiver`'s cache, or nothing when they can.
// The rank splits may differ (each receiving rank pulls its layers from whichever sending ranks
// hold them) but each must cover the layers exactly once, in order.
std::optional<std::string> layout_mismatch(const kv_layout& sender, const kv_layout& receiver);

}  // namespace troupe::kv::transfer
