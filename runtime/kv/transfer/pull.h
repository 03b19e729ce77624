// The receiving side of a KV transfer: copies a sequence's blocks from the replica that computed
// them into blocks this replica has already reserved, in the cache's own dtype, layer by layer.
// Which way the bytes come is the backend's business (kv_handle.h): a memcpy from another rank's
// cache in this process, a memcpy from the sender's shared-memory segment on this host, or a
// TCP stream from the sender's process written straight from its cache.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>

#include "runtime/kv/kv_cache.h"
#include "runtime/kv/transfer/kv_handle.h"

namespace troupe::kv::transfer {

// A transfer that could not be done; what() says which and why (the layout check's message for
// a mismatch). Nothing outside the reserved blocks was written.
class transfer_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct pull_result {
  backend used = backend::automatic;  // the last source's
  std::size_t bytes = 0;
  double seconds = 0;
};

// The receiving rank: its cache holds model layers [first_layer, first_layer + num_layers()).
struct pull_target {
  kv_cache* cache = nullptr;
  int first_layer = 0;
  kv_layout layout;                      // the receiving replica's (checked against the sender's)
  std::span<const std::int32_t> blocks;  // reserved, at least as many as the handle's
};

// Copies the blocks of `from` that hold its `positions` tokens into `to`, for the layers `to`
// holds. layer_done(model layer) runs after each layer is in place (a receiver may start on it).
// Throws transfer_error (layout mismatch, sender gone, timeout at `deadline`, backend `how`
// impossible between these two).
pull_result pull(const kv_handle& from, const pull_target& to, backend how, std::chrono::steady_clock::time_point deadline,
                 const std::function<void(int)>& layer_done = {});

// The backend `automatic` would use for `source` from this process.
backend choose_backend(const kv_source& source);

}  // namespace troupe::kv::transfer
