#include "runtime/kv/transfer/tcp.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "runtime/common/log.h"
#include "runtime/kv/kv_cache.h"

namespace troupe::kv::transfer {

namespace {

constexpr char magic[4] = {'T', 'K', 'V', '3'};
constexpr std::size_t max_credential = 255;  // a cache's key, its secret: bytes each
constexpr int max_connections = 64;  // authenticated, being served: 16 striped pulls at once
// Before a peer has shown a cache's secret it holds a connection for at most this long, in at
// most this many connections of its own and of all peers together: a flood of unauthenticated
// connections then never takes the slots of real pulls, and holds no memory beyond the header.
constexpr std::chrono::seconds handshake_limit{3};
constexpr int max_handshakes = 64;
constexpr int max_handshakes_per_peer = 16;
// Status codes of an answer: served, refused (no such cache, malformed), or busy: a limit was
// reached, and the puller tries again (a decode node's burst of pulls is not an attack).
constexpr std::uint32_t status_ok = 0, status_refused = 1, status_busy = 2;
constexpr int iov_chunk = 512;  // below IOV_MAX
// A pull of this many bytes or more goes over max_streams connections, each with every
// max_streams-th layer: on loopback one connection tops out near 2 GB/s on this VM's cores, where
// two moved 2.5-3.5 GB/s (tools: troupe bench kv-transfer). Two, not more: each stream is a thread.
constexpr std::size_t striping_threshold = std::size_t(8) << 20;
constexpr int max_streams = 4;

std::runtime_error net_error(const std::string& what) { return std::runtime_error(what + ": " + std::strerror(errno)); }

// Bulk transfers: the largest socket buffers the system allows without privileges (4 MiB on
// Debian's defaults), so a pull of a few MiB is in flight at once; autotuning starts small and
// moved 1.4-1.7 GB/s at 1-4 MiB where these buffers moved 3.5-6.
void set_buffers(int fd) {
  const int bytes = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void set_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  t = std::max(t, std::chrono::milliseconds(1));
  tv.tv_sec = time_t(t.count() / 1000);
  tv.tv_usec = suseconds_t((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Moves every byte of the iovecs, in chunks the kernel accepts; false on error or end of stream.
bool move_all(int fd, std::vector<iovec>& iov, bool send) {
  std::size_t first = 0;
  while (first < iov.size()) {
    const int n = int(std::min<std::size_t>(iov.size() - first, iov_chunk));
    const ssize_t r = send ? ::writev(fd, iov.data() + first, n) : ::readv(fd, iov.data() + first, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    std::size_t left = std::size_t(r);
    while (left > 0 && first < iov.size()) {
      if (left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      } else {
        iov[first].iov_base = static_cast<std::uint8_t*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
        left = 0;
      }
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
  return true;
}

bool send_bytes(int fd, const void* p, std::size_t n) {
  std::vector<iovec> v{{const_cast<void*>(p), n}};
  return move_all(fd, v, true);
}
bool recv_bytes(int fd, void* p, std::size_t n) {
  std::vector<iovec> v{{p, n}};
  return move_all(fd, v, false);
}

// Reads exactly n bytes before `deadline` (however slowly they drip); false otherwise.
bool recv_by(int fd, void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
  auto* at = static_cast<std::uint8_t*>(p);
  while (n > 0) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd pf{fd, POLLIN, 0};
    if (ms <= 0 || ::poll(&pf, 1, int(std::min<long long>(ms, INT_MAX))) != 1) return false;
    const ssize_t r = ::recv(fd, at, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    at += r;
    n -= std::size_t(r);
  }
  return true;
}

// A u8-length string of at most max_credential bytes, by the deadline.
bool recv_credential(int fd, std::string& out, std::chrono::steady_clock::time_point deadline) {
  std::uint8_t n = 0;
  if (!recv_by(fd, &n, 1, deadline)) return false;
  out.assign(n, '\0');
  return recv_by(fd, out.data(), n, deadline);
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void send_status(int fd, const std::string& error, std::uint32_t code = status_refused) {
  std::string out;
  put(out, error.empty() ? status_ok : code);
  if (!error.empty()) {
    put(out, std::uint32_t(error.size()));
    out += error;
  }
  send_bytes(fd, out.data(), out.size());
}

}  // namespace

tcp_server::tcp_server(cache_lookup find, const std::string& host) : find_(std::move(find)) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0)
    throw std::runtime_error("KV transfer server: cannot resolve '" + host + "': " + ::gai_strerror(rc));
  listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || ::listen(listen_fd_, 64) != 0) {
    auto e = net_error("KV transfer server: cannot listen on " + host);
    ::freeaddrinfo(res);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw e;
  }
  ::freeaddrinfo(res);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&a)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw net_error("KV transfer server: pipe");
  thread_ = std::thread([this] { accept_loop(); });
}

tcp_server::~tcp_server() {
  const char c = 0;
  [[maybe_unused]] auto r = ::write(wake_[1], &c, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  // Connections still being served hold their own fd and a reference to each cache they read;
  // the registry outlives them (it is process-wide).
}

std::string peer_of(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, host, sizeof host);
  if (a.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, host, sizeof host);
  return host;
}

void tcp_server::refuse(int fd, const std::string& peer, const std::string& why, bool busy) {
  ++refused_;
  send_status(fd, why, busy ? status_busy : status_refused);
  // One line a second at most: a flood must not turn into a flood of log lines.
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  ++unlogged_;
  if (now - last_log_ < std::chrono::seconds(1)) return;
  last_log_ = now;
  log::warn("kv transfer refused", {{"peer", peer}, {"reason", why}, {"refused_since_last_line", std::to_string(unlogged_)}});
  unlogged_ = 0;
}

void tcp_server::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string peer = peer_of(addr);
    bool admitted = false;
    {
      std::lock_guard lock(mu_);
      if (handshakes_ < max_handshakes && handshakes_by_peer_[peer] < max_handshakes_per_peer) {
        ++handshakes_;
        ++handshakes_by_peer_[peer];
        admitted = true;
      }
    }
    if (!admitted) {
      refuse(fd, peer, "too many unauthenticated KV transfer connections", true);
      ::close(fd);
      continue;
    }
    std::thread([this, fd, peer] {
      serve(fd, peer);
      ::close(fd);
    }).detach();
  }
}

// Ends the handshake phase of a connection from `peer` (once, whatever its outcome).
void tcp_server::end_handshake(const std::string& peer) {
  std::lock_guard lock(mu_);
  --handshakes_;
  if (--handshakes_by_peer_[peer] <= 0) handshakes_by_peer_.erase(peer);
}

// A request: "TKV3", u8 key length, key, u8 secret length, secret; once the secret is right,
// u32 first layer, u32 last layer, u32 stride, u32 block count (at most the cache's blocks),
// then the i32 block ids. Nothing is allocated for a peer before it shows the secret.
void tcp_server::serve(int fd, const std::string& peer) {
  const auto handshake_deadline = std::chrono::steady_clock::now() + handshake_limit;
  char m[4];
  std::string key, secret;
  const bool header = recv_by(fd, m, 4, handshake_deadline) && std::memcmp(m, magic, 4) == 0 &&
                      recv_credential(fd, key, handshake_deadline) && recv_credential(fd, secret, handshake_deadline);
  auto cache = header ? find_(key, secret) : nullptr;
  end_handshake(peer);
  if (!header) return refuse(fd, peer, "not a KV transfer request (or not within " + std::to_string(handshake_limit.count()) + " s)");
  if (!cache) return refuse(fd, peer, "no KV cache '" + key.substr(0, 64) + "' is exposed here with that secret");
  if (connections_.fetch_add(1) >= max_connections) {
    connections_.fetch_sub(1);
    return refuse(fd, peer, "too many KV transfers in progress", true);
  }
  serve_blocks(fd, *cache);
  connections_.fetch_sub(1);
}

void tcp_server::serve_blocks(int fd, const kv_cache& cache) {
  set_timeout(fd, std::chrono::seconds(30));
  set_buffers(fd);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::uint32_t head[4] = {};  // first, last, stride, count
  if (!recv_bytes(fd, head, sizeof head)) return;
  const auto [first, last, stride, n] = std::tuple(head[0], head[1], head[2], head[3]);
  if (stride == 0 || n > std::uint32_t(cache.config().num_blocks)) return send_status(fd, "malformed KV transfer request");
  std::vector<std::int32_t> blocks(n);
  if (!recv_bytes(fd, blocks.data(), std::size_t(n) * 4)) return;
  if (first >= last || int(last) > cache.num_layers())
    return send_status(fd, "layers [" + std::to_string(first) + ", " + std::to_string(last) + ") are not in the cache");
  for (auto b : blocks)
    if (b < 0 || b >= cache.config().num_blocks) return send_status(fd, "block " + std::to_string(b) + " is not in the cache");
  send_status(fd, "");
  const std::size_t bb = cache.block_bytes();
  const int seg = cache.region().fd();
  std::vector<iovec> iov;
  for (std::uint32_t l = first; l < last; l += stride) {  // straight from the cache's memory, layer by layer
    if (seg >= 0) {
      // From the segment's pages by reference (sendfile), a run of consecutive blocks at a time:
      // the kernel does not copy them into the socket, the receiver's read is the only copy. The
      // pages must not change until the receiver has read them: a sender holds the blocks until
      // the receiver releases them, after its pull.
      for (int kv = 0; kv < 2; ++kv)
        for (std::size_t i = 0; i < blocks.size();) {
          std::size_t run = 1;
          while (i + run < blocks.size() && blocks[i + run] == blocks[i] + std::int32_t(run)) ++run;
          off_t at = off_t(cache.block_data(int(l), kv, blocks[i]) - cache.region().data());
          std::size_t left = run * bb;
          while (left > 0) {
            const ssize_t sent = ::sendfile(fd, seg, &at, left);
            if (sent < 0 && errno == EINTR) continue;
            if (sent <= 0) return;
            left -= std::size_t(sent);
          }
          i += run;
        }
      continue;
    }
    iov.clear();
    for (int kv = 0; kv < 2; ++kv)
      for (auto b : blocks) iov.push_back({const_cast<std::uint8_t*>(cache.block_data(int(l), kv, b)), bb});
    if (!move_all(fd, iov, true)) return;
  }
}

namespace {

// One connection of a pull: connected, its request sent and accepted. Closed when it goes.
struct stream {
  int fd = -1;
  stream() = default;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { if (fd >= 0) ::close(fd); }
};

using steady = std::chrono::steady_clock;

std::chrono::milliseconds time_left(steady::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
}

std::runtime_error lost(const std::string& where, steady::time_point deadline, const std::string& what) {
  if (steady::now() >= deadline) return std::runtime_error("KV transfer from " + where + ": timed out " + what);
  return std::runtime_error("KV transfer from " + where + ": connection lost " + what);
}

// A sender at one of its limits: the pull may try again.
struct sender_busy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Connects to host:port and asks for every `stride`-th layer of [first, last); returns once the
// sender has accepted. Throws std::runtime_error naming what failed (sender_busy when busy).
void open_stream(stream& s, const std::string& host, std::uint16_t port, const std::string& where, const std::string& key,
                 const std::string& secret, int first, int last, int stride, std::span<const std::int32_t> blocks,
                 steady::time_point deadline) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("KV transfer from " + where + ": " + ::gai_strerror(rc));
  s.fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = s.fd < 0 ? -1 : ::connect(s.fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{s.fd, POLLOUT, 0};
    const auto ms = time_left(deadline).count();
    if (ms <= 0 || ::poll(&p, 1, int(std::min<long long>(ms, INT_MAX))) != 1)
      throw std::runtime_error("KV transfer from " + where + ": connect timed out");
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &el);
    errno = err;
    rc = err == 0 ? 0 : -1;
  }
  if (rc != 0) throw net_error("KV transfer from " + where + ": connect");
  ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) & ~O_NONBLOCK);
  set_timeout(s.fd, time_left(deadline));
  const int one = 1;
  ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_buffers(s.fd);
  if (key.size() > max_credential || secret.size() > max_credential)
    throw std::runtime_error("KV transfer from " + where + ": the cache's key or secret is over " + std::to_string(max_credential) + " bytes");
  std::string req(magic, 4);
  put(req, std::uint8_t(key.size()));
  req += key;
  put(req, std::uint8_t(secret.size()));
  req += secret;
  put(req, std::uint32_t(first));
  put(req, std::uint32_t(last));
  put(req, std::uint32_t(stride));
  put(req, std::uint32_t(blocks.size()));
  req.append(reinterpret_cast<const char*>(blocks.data()), blocks.size() * 4);
  if (!send_bytes(s.fd, req.data(), req.size())) throw lost(where, deadline, "sending the request");
  std::uint32_t status = 1;
  if (!recv_bytes(s.fd, &status, 4)) throw lost(where, deadline, "before the sender answered");
  if (status != status_ok) {
    std::uint32_t n = 0;
    std::string msg;
    if (recv_bytes(s.fd, &n, 4) && n < 4096) {
      msg.resize(n);
      if (!recv_bytes(s.fd, msg.data(), n)) msg.clear();
    }
    if (status == status_busy) throw sender_busy("KV transfer from " + where + " deferred: " + msg);
    throw std::runtime_error("KV transfer from " + where + " refused: " + (msg.empty() ? "no reason given" : msg));
  }
}

// open_stream, again while the sender is busy (a limit reached), backing off from 5 ms to
// 200 ms, until the deadline.
void open_stream_retrying(stream& s, const std::string& host, std::uint16_t port, const std::string& where, const std::string& key,
                          const std::string& secret, int first, int last, int stride, std::span<const std::int32_t> blocks,
                          steady::time_point deadline) {
  for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
    try {
      return open_stream(s, host, port, where, key, secret, first, last, stride, blocks, deadline);
    } catch (const sender_busy& e) {
      if (steady::now() + pause >= deadline) throw std::runtime_error(e.what());
      if (s.fd >= 0) ::close(s.fd);
      s.fd = -1;
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace

void tcp_pull(const std::string& host, std::uint16_t port, const std::string& key, const std::string& secret, int first,
              int last, std::span<const std::int32_t> blocks, std::size_t block_bytes,
              const std::function<tcp_destination(int)>& dst, const std::function<void(int)>& layer_done,
              std::chrono::steady_clock::time_point deadline) {
  const std::string where = host + ":" + std::to_string(port);
  const std::size_t bytes = 2 * std::size_t(last - first) * blocks.size() * block_bytes;
  const int n = bytes >= striping_threshold ? std::min(last - first, max_streams) : 1;
  std::vector<stream> streams(static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s)
    open_stream_retrying(streams[std::size_t(s)], host, port, where, key, secret, first + s, last, n, blocks, deadline);

  // Layers land out of order across streams; layer_done still runs in layer order, once each,
  // for the run of layers complete so far (under the lock, so never two at once).
  std::mutex mu;
  std::vector<char> done(std::size_t(last - first), 0);
  int next = first;
  std::exception_ptr error;
  auto receive = [&](int s) {
    try {
      std::vector<iovec> iov;
      for (int l = first + s; l < last; l += n) {
        const tcp_destination d = dst(l);
        iov.clear();
        for (auto* p : d.k) iov.push_back({p, block_bytes});
        for (auto* p : d.v) iov.push_back({p, block_bytes});
        set_timeout(streams[std::size_t(s)].fd, time_left(deadline));
        if (!move_all(streams[std::size_t(s)].fd, iov, false)) throw lost(where, deadline, "at layer " + std::to_string(l));
        std::lock_guard lock(mu);
        if (error) return;
        done[std::size_t(l - first)] = 1;
        while (next < last && done[std::size_t(next - first)]) {
          if (layer_done) layer_done(next);
          ++next;
        }
      }
    } catch (...) {
      std::lock_guard lock(mu);
      if (!error) error = std::current_exception();
      for (auto& other : streams) ::shutdown(other.fd, SHUT_RDWR);  // the other streams stop at once
    }
  };
  std::vector<std::thread> helpers;
  for (int s = 1; s < n; ++s) helpers.emplace_back(receive, s);
  receive(0);
  for (auto& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace troupe::kv::transfer
