// Files a model, an adapter or a tokenizer folder names, read only when they are regular files
// of a size known before the first byte is read: a symlink to /dev/zero, a FIFO or a folder is
// refused at once, where reading "until the end" would grow memory without bound or block.
#pragma once
#include <cstddef>
#include <string>

namespace troupe {

// An open descriptor on a regular file (symlinks followed) and its size; closes it when dropped.
class regular_file {
 public:
  // Throws input_error "<path>: cannot open: why", "<path>: is not a regular file (...)" or
  // "<path>: N bytes, more than the M a <what> may have". Opening never blocks (a FIFO).
  regular_file(const std::string& path, std::size_t max_bytes, const std::string& what);
  ~regular_file();
  regular_file(const regular_file&) = delete;
  regular_file& operator=(const regular_file&) = delete;

  int fd() const { return fd_; }
  std::size_t size() const { return size_; }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
};

// The whole of a regular file of at most `max_bytes`, as regular_file checks it; throws
// input_error naming the path when it is not one or shrinks while read.
std::string read_regular_file(const std::string& path, std::size_t max_bytes, const std::string& what);

// Bounds for the files model folders hold.
inline constexpr std::size_t max_json_file_bytes = std::size_t(64) << 20;     // config.json, tokenizer_config.json, ...
inline constexpr std::size_t max_tokenizer_file_bytes = std::size_t(512) << 20;  // tokenizer.json
inline constexpr std::size_t max_weights_file_bytes = std::size_t(1) << 40;    // one safetensors or GGUF file

}  // namespace troupe
