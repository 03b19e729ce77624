// KV blocks over TCP, for replicas on different hosts: the sender's process runs one server that
// sends blocks straight from the cache (sendfile from its shared-memory segment, so the kernel
// references the pages instead of copying them; writev from private memory) and the receiver
// reads them straight into its reserved blocks (readv), one layer after another.
//
// Wire format (little-endian), one request per connection:
//   request:  "TKV3", u8 key length, key, u8 secret length, secret (the server checks them
//             here, before it reads or allocates anything more), u32 first layer, u32 last
//             layer, u32 stride (layers first, first + stride, ... below last; the sender cache's
//             own layer indices), u32 block count (at most the cache's), i32 block ids
//   response: u32 status; 0: for each layer, its K blocks then its V blocks, in request order;
//             otherwise u32 length and a message: 1 refused, 2 busy (a limit reached: the
//             puller tries again, backing off, until its deadline).
// Nothing is served without the secret of the exposed cache (kv_source::secret). A peer that has
// not shown it holds a connection for at most 3 s, in at most 16 connections (64 for all peers
// together), apart from the 64 slots of authenticated pulls; every refusal is counted and logged
// (one line a second at most).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace troupe::kv {
class kv_cache;
}
namespace troupe::kv::transfer {

// The cache exposed under a key, if the secret is its own (registry::find); null otherwise.
using cache_lookup = std::function<std::shared_ptr<const kv_cache>(const std::string& key, const std::string& secret)>;

class tcp_server {
 public:
  // Listens on host:0 and serves the caches `find` gives (the process's registry). Throws
  // std::runtime_error if it cannot bind.
  tcp_server(cache_lookup find, const std::string& host);
  ~tcp_server();
  std::uint16_t port() const { return port_; }
  // Connections refused so far: unauthenticated, malformed, or beyond a limit.
  std::uint64_t refused() const { return refused_; }

 private:
  void accept_loop();
  void serve(int fd, const std::string& peer);
  void serve_blocks(int fd, const kv_cache& cache);
  void end_handshake(const std::string& peer);
  void refuse(int fd, const std::string& peer, const std::string& why, bool busy = false);
  const cache_lookup find_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends accept_loop
  std::uint16_t port_ = 0;
  std::atomic<int> connections_{0};       // authenticated, being served
  std::atomic<std::uint64_t> refused_{0};
  std::mutex mu_;                          // guards the handshake counts and the log throttle
  int handshakes_ = 0;
  std::map<std::string, int> handshakes_by_peer_;
  std::chrono::steady_clock::time_point last_log_{};
  std::uint64_t unlogged_ = 0;
  std::thread thread_;
};

// Where the bytes of one layer of the pulled blocks go: K then V destinations for each block.
struct tcp_destination {
  std::vector<std::uint8_t*> k, v;  // per block, block_bytes each
};

// Reads layers [first, last) (the sender cache's indices) of `blocks` from host:port into the
// destinations of each layer (dst(layer) gives them), calling layer_done(i) once layers first..i
// are all in place, in layer order. A large pull is striped over up to four connections, so dst and
// layer_done may run on a helper thread (never two layer_done at once). Throws
// std::runtime_error naming what failed; gives up at `deadline`.
void tcp_pull(const std::string& host, std::uint16_t port, const std::string& key, const std::string& secret,
              int first, int last, std::span<const std::int32_t> blocks, std::size_t block_bytes,
              const std::function<tcp_destination(int layer)>& dst, const std::function<void(int)>& layer_done,
              std::chrono::steady_clock::time_point deadline);

}  // namespace troupe::kv::transfer
