// Memory-mapped reader and streaming writer for the safetensors format
// (8-byte little-endian header length, a JSON header, then raw little-endian tensor data).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant.h"

namespace troupe::model {

struct tensor_info {
  std::string name;
  std::string dtype_name;  // as stored: "F32", "F16", "BF16", ...
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;  // into the mapping; valid while the file is open
  std::size_t bytes = 0;
  std::string file;  // for error messages
  // Set for a GGUF tensor stored in a quantized block format (its rows as U8 bytes); a
  // safetensors tensor's format comes from config.json instead.
  std::optional<kernels::quant_type> quant;
  std::optional<kernels::kquant_type> kquant;  // likewise for the K-quant and IQ4_XS formats (GGUF only)

  std::int64_t numel() const;
  // The kernel dtype; throws input_error naming file and tensor for unsupported types.
  kernels::dtype type() const;
};

// The safetensors files of a model folder: those model.safetensors.index.json maps tensors to
// when it exists (a folder may also hold another checkpoint, e.g. consolidated.safetensors),
// else every *.safetensors, sorted. Throws input_error naming the index for a bad one.
std::vector<std::string> model_safetensors_files(const std::string& dir);

// One mapped .safetensors file. Throws input_error (naming the file) on a malformed header,
// an out-of-range offset or a size that does not match dtype x shape.
class safetensors_file {
 public:
  explicit safetensors_file(const std::string& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::map<std::string, tensor_info>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  void read_header();  // the header and tensor table of the mapped file
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, tensor_info> tensors_;
};

// Writes tensors one after another without holding them all in memory: declare every tensor
// first (the header must come first), then write each one's bytes in declaration order.
class safetensors_writer {
 public:
  void declare(const std::string& name, kernels::dtype type, std::vector<std::int64_t> shape);
  // A tensor of any safetensors dtype ("U8", "I8", ...), written as raw bytes.
  void declare_stored(const std::string& name, const std::string& dtype_name, std::vector<std::int64_t> shape);
  // Opens `path` and writes the header. Throws input_error if the file cannot be written.
  void open(const std::string& path);
  // Appends raw bytes of the current tensor; a tensor may be written in several pieces.
  void write(const void* data, std::size_t bytes);
  void close();
  ~safetensors_writer();

 private:
  struct entry { std::string name; std::string dtype_name; std::vector<std::int64_t> shape; std::size_t bytes; };
  std::vector<entry> entries_;
  std::FILE* out_ = nullptr;
  std::string path_;
};

}  // namespace troupe::model
