// The memory behind a KV cache: private heap memory, or a POSIX shared-memory segment that
// another process on the same host maps to read blocks without a copy through a socket (the
// shared-memory transfer backend, transfer/pull.h). A segment is created readable and writable
// by this user only (0600) and unlinked when its owner goes; segments of processes that died
// without unlinking are removed by remove_stale_segments(), which a process runs before it makes
// its first segment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace troupe::kv {

class kv_region {
 public:
  // Zero-filled private memory.
  static std::unique_ptr<kv_region> heap(std::size_t bytes);
  // A new zero-filled segment `name` ("/troupe-kv-..."), mapped read-write. Throws
  // std::runtime_error naming the segment and the reason when it cannot be made.
  static std::unique_ptr<kv_region> create_shared(const std::string& name, std::size_t bytes);
  // Another process's segment, mapped read-only (pages populated up front). Throws
  // std::runtime_error when it is absent or smaller than `bytes`.
  static std::unique_ptr<kv_region> open_shared(const std::string& name, std::size_t bytes);

  ~kv_region();
  kv_region(const kv_region&) = delete;
  kv_region& operator=(const kv_region&) = delete;

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }  // empty for heap memory
  bool shared() const { return !name_.empty(); }
  // The segment's file descriptor (a segment this process created), else -1: the TCP server
  // sends from it with sendfile, so the kernel references the pages instead of copying them.
  int fd() const { return fd_; }

  // Removes segment `name` from the namespace now: no process can map it any more, while
  // mappings made before stay valid until unmapped (a cache withdrawn from its registry).
  static void unlink_name(const std::string& name);

 private:
  kv_region() = default;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // unlinks the segment name on destruction
  int fd_ = -1;
  bool mapped_ = false;
};

// A segment name unique on this host: "/troupe-kv-<pid>-<n>".
std::string new_segment_name();

// Unlinks "/troupe-kv-<pid>-*" segments whose process no longer exists (killed with SIGKILL).
// Returns how many were removed.
int remove_stale_segments();

}  // namespace troupe::kv
