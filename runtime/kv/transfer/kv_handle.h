// What a receiver needs to pull a sequence's KV straight from the replica that computed it: the
// sender's layout, where each of its ranks' caches can be reached, and the blocks. The request
// owner carries this handle between the replicas, never the KV itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kv/transfer/kv_layout.h"

namespace troupe::kv::transfer {

// One sending rank's cache, reachable three ways: in the same process by `key`; on the same host
// by mapping the shared-memory segment `key` names (when `shared`); from anywhere over TCP at
// host:port, presenting `secret`.
struct kv_source {
  std::string key;           // the cache's name in its process's registry (its segment, if shared)
  bool shared = false;       // `key` is a shared-memory segment another process can map
  std::int32_t num_blocks = 0;  // of that cache: where each block sits in the segment
  std::string host_id;       // the sender's host (its boot id): shared memory only on the same one
  std::int32_t pid = 0;      // the sender's process: the in-process path only in the same one
  std::string host;          // the sender process's transfer server (empty: none)
  std::uint16_t port = 0;
  std::string secret;        // a random capability; the server serves nothing without it
};

struct kv_handle {
  std::string request;                 // the request whose KV this is (for messages)
  kv_layout layout;                    // the sender's
  std::vector<kv_source> sources;      // one per layout.ranks entry
  std::vector<std::int32_t> blocks;    // the sender's block table, covering `positions`
  std::int32_t positions = 0;          // tokens of KV the blocks hold

  bool empty() const { return blocks.empty(); }
};

// How a pull reaches the sender: the backend `automatic` picks the cheapest that can (in-process,
// else shared memory on the same host, else TCP). NCCL moves device memory (kernels/cuda).
enum class backend : std::uint8_t { automatic, inproc, shm, tcp, nccl };

const char* backend_name(backend b);
// "auto", "inproc", "shm", "tcp", "nccl"; nothing for anything else.
bool parse_backend(const std::string& s, backend& out);

}  // namespace troupe::kv::transfer
