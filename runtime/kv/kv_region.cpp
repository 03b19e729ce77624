#include "runtime/kv/kv_region.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace troupe::kv {

namespace {

std::runtime_error sys_error(const std::string& what, const std::string& name) {
  return std::runtime_error(what + " shared-memory segment " + name + ": " + std::strerror(errno));
}

}  // namespace

std::unique_ptr<kv_region> kv_region::heap(std::size_t bytes) {
  std::unique_ptr<kv_region> r(new kv_region);
  r->data_ = static_cast<std::uint8_t*>(std::calloc(bytes ? bytes : 1, 1));
  if (!r->data_) throw std::bad_alloc();
  r->size_ = bytes;
  return r;
}

std::unique_ptr<kv_region> kv_region::create_shared(const std::string& name, std::size_t bytes) {
  // Before this process's first segment: those that killed processes left behind go.
  static const int stale = remove_stale_segments();
  (void)stale;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw sys_error("cannot create", name);
  if (::ftruncate(fd, off_t(bytes ? bytes : 1)) != 0) {
    auto e = sys_error("cannot size", name);
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw e;
  }
  void* p = ::mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    auto e = sys_error("cannot map", name);
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw e;
  }
  std::unique_ptr<kv_region> r(new kv_region);
  r->data_ = static_cast<std::uint8_t*>(p);  // a fresh segment reads as zeros
  r->size_ = bytes;
  r->name_ = name;
  r->owner_ = true;
  r->mapped_ = true;
  r->fd_ = fd;
  return r;
}

std::unique_ptr<kv_region> kv_region::open_shared(const std::string& name, std::size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) throw sys_error("cannot open", name);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || std::size_t(st.st_size) < bytes) {
    ::close(fd);
    throw std::runtime_error("shared-memory segment " + name + " holds " + std::to_string(st.st_size) +
                             " bytes, the sender's cache needs " + std::to_string(bytes));
  }
  // Populated now: the first pull from it must not pay a page fault per 4 KiB.
  void* p = ::mmap(nullptr, bytes ? bytes : 1, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw sys_error("cannot map", name);
  std::unique_ptr<kv_region> r(new kv_region);
  r->data_ = static_cast<std::uint8_t*>(p);
  r->size_ = bytes;
  r->name_ = name;
  r->mapped_ = true;
  return r;
}

kv_region::~kv_region() {
  if (fd_ >= 0) ::close(fd_);
  if (mapped_) {
    ::munmap(data_, size_ ? size_ : 1);
    if (owner_) ::shm_unlink(name_.c_str());
  } else {
    std::free(data_);
  }
}

void kv_region::unlink_name(const std::string& name) { ::shm_unlink(name.c_str()); }

std::string new_segment_name() {
  static std::atomic<std::uint64_t> next{0};
  return "/troupe-kv-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
}

int remove_stale_segments() {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string f = e.path().filename().string();
    const std::string prefix = "troupe-kv-";
    if (f.rfind(prefix, 0) != 0) continue;
    const auto dash = f.find('-', prefix.size());
    if (dash == std::string::npos) continue;
    const long pid = std::strtol(f.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)) removed += ::shm_unlink(("/" + f).c_str()) == 0;
  }
  return removed;
}

}  // namespace troupe::kv
