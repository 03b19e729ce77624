#include "runtime/kv/transfer/pull.h"

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include <unistd.h>

#include "kernels/cpu/stream_copy.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/transfer/registry.h"
#include "runtime/kv/transfer/tcp.h"

namespace troupe::kv::transfer {

namespace {

// Transfers from this size on copy with non-temporal stores: beyond a typical last-level cache.
constexpr std::size_t stream_threshold = std::size_t(8) << 20;

// Senders' segments this process has mapped, kept so each is mapped (and populated) once.
class segment_maps {
 public:
  std::shared_ptr<const kv_region> get(const std::string& name, std::size_t bytes) {
    std::lock_guard lock(mu_);
    auto it = maps_.find(name);
    if (it != maps_.end() && it->second->size() >= bytes) return it->second;
    std::shared_ptr<const kv_region> r = kv_region::open_shared(name, bytes);
    maps_[name] = r;
    order_.push_back(name);
    while (order_.size() > 64) {  // bounded: senders restart under new names
      maps_.erase(order_.front());
      order_.pop_front();
    }
    return r;
  }
  void forget(const std::string& name) {
    std::lock_guard lock(mu_);
    maps_.erase(name);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const kv_region>> maps_;
  std::deque<std::string> order_;
};

segment_maps& maps() {
  static segment_maps* m = new segment_maps;
  return *m;
}

backend resolve(backend how, const kv_source& s) {
  const bool here = s.pid == std::int32_t(::getpid()) && registry::global().find(s.key) != nullptr;
  const bool same_host = s.shared && s.host_id == host_id();
  switch (how) {
    case backend::automatic:
      if (here) return backend::inproc;
      if (same_host) return backend::shm;
      if (s.port) return backend::tcp;
      throw transfer_error("KV transfer: the sender's cache " + s.key + " is on another host and serves no TCP");
    case backend::inproc:
      if (!here) throw transfer_error("KV transfer: backend inproc, but the sender's cache " + s.key + " is not in this process");
      return how;
    case backend::shm:
      if (!s.shared) throw transfer_error("KV transfer: backend shm, but the sender's cache " + s.key + " is not in shared memory");
      if (s.host_id != host_id()) throw transfer_error("KV transfer: backend shm, but the sender is on another host");
      return how;
    case backend::tcp:
      if (!s.port) throw transfer_error("KV transfer: backend tcp, but the sender's process serves no TCP");
      return how;
    case backend::nccl:
      throw transfer_error("KV transfer: backend nccl moves device memory; these caches are in host memory");
  }
  return how;
}

// The handle and the reserved blocks agree with each other: the blocks to copy, or why not.
std::size_t blocks_to_pull(const kv_handle& from, const pull_target& to) {
  if (auto why = layout_mismatch(from.layout, to.layout)) throw transfer_error(*why);
  if (from.sources.size() != from.layout.ranks.size())
    throw transfer_error("KV transfer: the handle names " + std::to_string(from.sources.size()) + " sources for " +
                         std::to_string(from.layout.ranks.size()) + " ranks");
  const std::size_t n = std::size_t(blocks_for(from.positions, from.layout.block_size));
  if (from.blocks.size() < n) throw transfer_error("KV transfer: the handle's blocks do not cover its positions");
  if (to.blocks.size() < n)
    throw transfer_error("KV transfer: " + std::to_string(to.blocks.size()) + " blocks reserved, " + std::to_string(n) + " needed");
  if (to.cache->block_bytes() != from.layout.block_bytes())
    throw transfer_error("KV transfer: the receiving cache's block size differs from its layout");
  return n;
}

// One sending rank's layers: [first, last) of its own, which start at layer `rank_first` of
// the model; the receiving cache starts at model layer `receiver_first`.
struct layer_run {
  int first = 0, last = 0, rank_first = 0, receiver_first = 0;
};

void pull_over_tcp(const kv_source& s, layer_run run, std::span<const std::int32_t> src_blocks, const pull_target& to,
                   std::size_t bb, std::chrono::steady_clock::time_point deadline, const std::function<void(int)>& layer_done) {
  kv_cache& dst = *to.cache;
  const std::size_t n = src_blocks.size();
  try {
    tcp_pull(s.host, s.port, s.key, s.secret, run.first, run.last, src_blocks, bb,
             [&](int local) {
               tcp_destination d;
               for (std::size_t i = 0; i < n; ++i) {
                 d.k.push_back(dst.block_data(local + run.rank_first - run.receiver_first, 0, to.blocks[i]));
                 d.v.push_back(dst.block_data(local + run.rank_first - run.receiver_first, 1, to.blocks[i]));
               }
               return d;
             },
             [&](int local) {
               if (layer_done) layer_done(local + run.rank_first);
             },
             deadline);
  } catch (const std::runtime_error& e) {
    throw transfer_error(e.what());
  }
}

}  // namespace

backend choose_backend(const kv_source& source) { return resolve(backend::automatic, source); }

pull_result pull(const kv_handle& from, const pull_target& to, backend how, std::chrono::steady_clock::time_point deadline,
                 const std::function<void(int)>& layer_done) {
  const auto t0 = std::chrono::steady_clock::now();
  const kv_layout& lay = from.layout;
  const std::size_t n = blocks_to_pull(from, to);
  kv_cache& dst = *to.cache;
  const std::span<const std::int32_t> src_blocks(from.blocks.data(), n);
  const std::size_t bb = lay.block_bytes();
  pull_result res;
  const int lo = to.first_layer, hi = to.first_layer + dst.num_layers();
  for (int l = lo; l < hi;) {  // one run of layers per sending rank
    const int r = lay.rank_of(l);
    const int rfirst = lay.ranks[std::size_t(r)].first, rlast = lay.ranks[std::size_t(r)].second;
    const int end = std::min(hi, rlast);
    const kv_source& s = from.sources[std::size_t(r)];
    res.used = resolve(how, s);
    if (std::chrono::steady_clock::now() >= deadline) throw transfer_error("KV transfer of " + from.request + ": timed out");
    // Past the caches' size, stores that bypass them (kernels/cpu/stream_copy.h).
    const bool streaming = 2 * std::size_t(hi - lo) * n * bb >= stream_threshold;
    auto copy_from = [&](const std::uint8_t* base, int src_blocks_total) {
      for (int m = l; m < end; ++m) {
        for (int kv = 0; kv < 2; ++kv)
          for (std::size_t i = 0; i < n; ++i) {
            std::uint8_t* d = dst.block_data(m - lo, kv, to.blocks[i]);
            const std::uint8_t* s = base + kv_cache::block_offset(m - rfirst, kv, src_blocks[i], src_blocks_total, bb);
            if (streaming)
              kernels::stream_copy(d, s, bb);
            else
              std::memcpy(d, s, bb);
          }
        if (streaming) kernels::stream_fence();
        if (layer_done) layer_done(m);
      }
    };
    switch (res.used) {
      case backend::inproc: {
        auto src = registry::global().find(s.key);
        if (!src) throw transfer_error("KV transfer of " + from.request + ": the sender's cache is gone");
        copy_from(src->region().data(), src->config().num_blocks);
        break;
      }
      case backend::shm: {
        const std::size_t bytes = 2 * std::size_t(rlast - rfirst) * std::size_t(s.num_blocks) * bb;
        std::shared_ptr<const kv_region> seg;
        try {
          seg = maps().get(s.key, bytes);
        } catch (const std::exception& e) {
          throw transfer_error("KV transfer of " + from.request + ": " + e.what());
        }
        copy_from(seg->data(), s.num_blocks);
        break;
      }
      case backend::tcp: {
        pull_over_tcp(s, {l - rfirst, end - rfirst, rfirst, lo}, src_blocks, to, bb, deadline, layer_done);
        break;
      }
      default:
        throw transfer_error("KV transfer: no such backend here");
    }
    res.bytes += 2 * std::size_t(end - l) * n * bb;
    l = end;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace troupe::kv::transfer
