// Reader for GGUF files (llama.cpp's single-file model format, versions 2 and 3): the metadata
// key/values and the tensor table of a memory-mapped file, every read bounds-checked.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata as
// (string key, u32 type, value); each tensor as (string name, u32 n_dims, u64 dims[n_dims],
// u32 ggml type, u64 offset); then, aligned to general.alignment (32 unless given), the tensor
// data, each tensor at its offset. Strings are u64 length + bytes. Dimensions are innermost
// first (ne[0] = a row's length), so shape() reverses them into the row-major order of
// safetensors. Written because no Debian package reads GGUF.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::model {

// The ggml tensor types this project reads; others are refused naming the tensor and the type.
enum class ggml_type : std::uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, iq4_xs = 23, bf16 = 30
};

// The name of a ggml type number as llama.cpp prints it ("Q6_K", ...), or "type N".
std::string ggml_type_name(std::uint32_t t);

struct gguf_tensor {
  std::string name;
  std::vector<std::int64_t> shape;  // row-major: {rows, row length} for a matrix
  ggml_type type = ggml_type::f32;
  const std::uint8_t* data = nullptr;  // into the mapping
  std::size_t bytes = 0;
  std::size_t file_offset = 0;  // where data starts in the file
};

class gguf_file {
 public:
  // Maps and parses `path`. Throws input_error naming the file and what is wrong: a bad magic
  // or version, a truncated header or tensor, an unknown metadata or tensor type, a tensor
  // whose data lies outside the file or whose row is not whole blocks.
  explicit gguf_file(const std::string& path);
  ~gguf_file();
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  std::uint32_t version() const { return version_; }
  // Every metadata value as JSON (integers, floats, bools, strings, arrays of them).
  const nlohmann::json& metadata() const { return meta_; }
  const std::map<std::string, gguf_tensor>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t version_ = 0;
  nlohmann::json meta_ = nlohmann::json::object();
  std::map<std::string, gguf_tensor> tensors_;
};

}  // namespace troupe::model
