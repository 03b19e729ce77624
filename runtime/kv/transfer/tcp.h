// KV blocks over TCP, for replicas on different hosts: the sender's process runs one server that
// sends blocks straight from the cache (sendfile from its shared-memory segment, so the kernel
// references the pages instead of copying them; writev from private memory) and the receiver
// reads them straight into its reserved blocks (readv), one layer after another.
//
// Wire format (little-endian), one request per connection:
//   request:  "TKV2", u32 body length, body = u16 key length, key, u16 secret length, secret,
//             u32 first layer, u32 last layer, u32 stride (layers first, first + stride, ...
//             below last; the sender cache's own layer indices), u32 block count, i32 block ids
//   response: u32 status; 0: for each layer, its K blocks then its V blocks, in request order;
//             otherwise u32 length and a message.
// Nothing is served without the secret of the exposed cache (kv_source::secret).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace troupe::kv::transfer {

class registry;

class tcp_server {
 public:
  // Listens on host:0 and serves caches of `reg`. Throws std::runtime_error if it cannot bind.
  tcp_server(const registry& reg, const std::string& host);
  ~tcp_server();
  std::uint16_t port() const { return port_; }

 private:
  void accept_loop();
  void serve(int fd);
  const registry& reg_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends accept_loop
  std::uint16_t port_ = 0;
  std::atomic<int> connections_{0};
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
