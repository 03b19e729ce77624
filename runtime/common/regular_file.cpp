#include "runtime/common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/common/error.h"

namespace troupe {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

}  // namespace

regular_file::regular_file(const std::string& path, std::size_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw input_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = ::fstat(fd_, &st) == 0 ? kind_of(st.st_mode) : std::strerror(errno);
    ::close(fd_);
    throw input_error(path + ": is not a regular file (" + kind + "); a " + what + " must be one");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = std::size_t(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    throw input_error(path + ": " + std::to_string(size_) + " bytes, more than the " + std::to_string(max_bytes) + " a " + what +
                      " may have");
  }
}

regular_file::~regular_file() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes, const std::string& what) {
  const regular_file f(path, max_bytes, what);
  std::string out(f.size(), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(f.fd(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw input_error(path + ": cannot read: " + std::strerror(errno));
    if (n == 0) throw input_error(path + ": shrank while it was read");
    got += std::size_t(n);
  }
  return out;
}

}  // namespace troupe
