#include "runtime/kv/transfer/registry.h"

#include <fstream>
#include <random>

#include <unistd.h>

#include "runtime/common/constant_time.h"
#include "runtime/kv/transfer/tcp.h"

namespace troupe::kv::transfer {

registry& registry::global() {
  static registry* r = new registry;  // never destroyed: server threads may outlive static teardown
  return *r;
}

void registry::set_tcp_host(const std::string& host) {
  std::lock_guard lock(mu_);
  if (!server_) tcp_host_ = host;
}

kv_source registry::expose(std::shared_ptr<const kv_cache> cache) {
  static std::atomic<std::uint64_t> next{0};
  kv_source s;
  s.shared = cache->region().shared();
  s.key = s.shared ? cache->region().name() : "heap-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
  s.num_blocks = cache->config().num_blocks;
  s.host_id = host_id();
  s.pid = std::int32_t(::getpid());
  std::random_device rd;  // a capability for the TCP server: 128 random bits, hex
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) s.secret += hex[rd() % 16];
  std::lock_guard lock(mu_);
  caches_[s.key] = {std::move(cache), s.secret};
  return s;
}

kv_source registry::with_tcp(kv_source s) {
  std::lock_guard lock(mu_);
  if (!server_ && server_error_.empty()) {
    try {
      server_ = std::make_unique<tcp_server>(
          [this](const std::string& key, const std::string& secret) { return find(key, secret); }, tcp_host_);
    } catch (const std::exception& e) {
      server_error_ = e.what();  // shared memory and in-process pulls still work
    }
  }
  if (server_) {
    s.host = tcp_host_;
    s.port = server_->port();
  }
  return s;
}

void registry::withdraw(const std::string& key) {
  std::shared_ptr<const kv_cache> last;  // released outside the lock
  std::lock_guard lock(mu_);
  auto it = caches_.find(key);
  if (it == caches_.end()) return;
  last = std::move(it->second.cache);
  caches_.erase(it);
  // Its segment's name goes now: a transfer still reading it (a TCP connection, a receiver's
  // mapping) keeps the memory until it is done, but nothing can map it again, and a process
  // that exits right after leaves nothing behind in /dev/shm.
  if (last->region().shared()) kv_region::unlink_name(last->region().name());
}

std::shared_ptr<const kv_cache> registry::find(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = caches_.find(key);
  return it == caches_.end() ? nullptr : it->second.cache;
}

std::shared_ptr<const kv_cache> registry::find(const std::string& key, const std::string& secret) const {
  std::lock_guard lock(mu_);
  auto it = caches_.find(key);
  if (it == caches_.end() || !constant_time_equal(secret, it->second.secret)) return nullptr;
  return it->second.cache;
}

const std::string& host_id() {
  static const std::string id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return s + "/" + name;  // two containers on one kernel share a boot id, not a hostname
  }();
  return id;
}

const char* backend_name(backend b) {
  switch (b) {
    case backend::automatic: return "auto";
    case backend::inproc: return "inproc";
    case backend::shm: return "shm";
    case backend::tcp: return "tcp";
    case backend::nccl: return "nccl";
  }
  return "?";
}

bool parse_backend(const std::string& s, backend& out) {
  for (auto b : {backend::automatic, backend::inproc, backend::shm, backend::tcp, backend::nccl})
    if (s == backend_name(b)) {
      out = b;
      return true;
    }
  return false;
}

}  // namespace troupe::kv::transfer
