// The KV caches of this process that other replicas may pull blocks from, by key, and the TCP
// server that serves them to other hosts. A rank exposes its cache when it is made and withdraws
// it when it goes; a pull holds the cache alive while it copies.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/kv/kv_cache.h"
#include "runtime/kv/transfer/kv_handle.h"

namespace troupe::kv::transfer {

class tcp_server;

class registry {
 public:
  static registry& global();

  // Where the TCP server listens once the first cache is exposed: loopback unless the topology
  // names this node's address. Call before exposing (later calls change nothing once it runs).
  void set_tcp_host(const std::string& host);

  // Makes `cache` pullable in this process and, if it is in shared memory, on this host;
  // returns how to reach it (the handle says which layers it holds).
  kv_source expose(std::shared_ptr<const kv_cache> cache);
  // Makes it unreachable: removed here, and its shared-memory segment unlinked.
  // `s` (exposed here) with the TCP server's address, which is started on first use (so a
  // process whose KV never leaves it listens on nothing).
  kv_source with_tcp(kv_source s);
  void withdraw(const std::string& key);

  // The cache exposed under `key` (null when withdrawn or never here); with `secret`, only if it
  // matches (compared in constant time).
  std::shared_ptr<const kv_cache> find(const std::string& key) const;
  std::shared_ptr<const kv_cache> find(const std::string& key, const std::string& secret) const;


 private:
  registry() = default;
  struct entry {
    std::shared_ptr<const kv_cache> cache;
    std::string secret;
  };
  mutable std::mutex mu_;
  std::map<std::string, entry> caches_;
  std::string tcp_host_ = "127.0.0.1";
  std::unique_ptr<tcp_server> server_;
  std::string server_error_;
};

// This host's identity for "same host" decisions: the kernel's boot id.
const std::string& host_id();

}  // namespace troupe::kv::transfer
