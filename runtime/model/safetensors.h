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

#include <nlohmann/json_fwd.hpp>

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
  // Set for a tensor stored in a quantized block format (its rows as U8 bytes) that says its own
  // format: a GGUF tensor, or a safetensors tensor named in its file's metadata (a folder in a
  // mix, below). A folder of one format says it in config.json instead.
  std::optional<kernels::quant_type> quant;
  std::optional<kernels::kquant_type> kquant;  // likewise for the K-quant and IQ4_XS formats

  std::int64_t numel() const;
  // Its values in f32 (a plain-dtype tensor; type() throws for others).
  std::vector<float> to_f32() const;
  // The kernel dtype; throws input_error naming file and tensor for unsupported types.
  kernels::dtype type() const;
};

// The safetensors files of a model folder: those model.safetensors.index.json maps tensors to
// when it exists (a folder may also hold another checkpoint, e.g. consolidated.safetensors),
// else every *.safetensors, sorted. Throws input_error naming the index for a bad one.
std::vector<std::string> model_safetensors_files(const std::string& dir);

// The metadata key that names a tensor's block format in a folder written in a mix of formats
// (`troupe model quantize --type q4_k_m`): "troupe.format:<tensor name>" -> "q4_k", "q6_k",
// "q8_0", ... The tensor is U8 rows of that format's blocks.
inline std::string format_metadata_key(const std::string& tensor) { return "troupe.format:" + tensor; }

// One mapped .safetensors file. Throws input_error (naming the file) on a malformed header,
// an out-of-range offset, a size that does not match dtype x shape, or a format in the
// metadata that names no tensor, no known format, or a tensor that is not U8 rows of it.
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
  void read_formats(const nlohmann::json& metadata);  // the tensors' block formats it names
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
  // A string in the header's __metadata__ (before open()).
  void metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Opens `path` and writes the header. Throws input_error if the file cannot be written.
  void open(const std::string& path);
  // Appends raw bytes of the current tensor; a tensor may be written in several pieces.
  void write(const void* data, std::size_t bytes);
  void close();
  ~safetensors_writer();

 private:
  struct entry { std::string name; std::string dtype_name; std::vector<std::int64_t> shape; std::size_t bytes; };
  std::vector<entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::FILE* out_ = nullptr;
  std::string path_;
};

}  // namespace troupe::model
