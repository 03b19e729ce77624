#include "runtime/model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"

namespace troupe::model {

using kernels::dtype;

std::int64_t tensor_info::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

kernels::dtype tensor_info::type() const {
  if (dtype_name == "F32") return dtype::f32;
  if (dtype_name == "F16") return dtype::f16;
  if (dtype_name == "BF16") return dtype::bf16;
  throw input_error(file + ": tensor '" + name + "' has dtype " + dtype_name +
                    "; supported: F32, F16, BF16");
}

namespace {

std::size_t stored_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

const char* stored_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::int8: return "I8";
  }
  return "?";
}

// A header list of integers; anything else (floats, which nlohmann would convert with undefined
// behaviour past the range) is an error naming the tensor.
template <class T>
std::vector<T> integers(const nlohmann::json& v, const std::string& path, const std::string& name, const char* what) {
  if (!v.is_array()) throw input_error(path + ": tensor '" + name + "': " + what + " is not a list");
  std::vector<T> out;
  for (const auto& x : v) {
    if (!x.is_number_integer() || (std::is_unsigned_v<T> && !x.is_number_unsigned() && x.get<std::int64_t>() < 0))
      throw input_error(path + ": tensor '" + name + "': " + what + " must hold non-negative integers");
    out.push_back(x.get<T>());
  }
  return out;
}

}  // namespace

std::vector<float> tensor_info::to_f32() const {
  const kernels::dtype d = type();
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = kernels::load_as_f32(data, d, i);
  return out;
}

std::vector<std::string> model_safetensors_files(const std::string& dir) {
  std::vector<std::string> paths;
  const std::string index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    const nlohmann::json j = parse_json(read_regular_file(index, max_json_file_bytes, "safetensors index"), index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw input_error(index + ": expected an object with a \"weight_map\" of tensor name -> file");
    std::set<std::string> files;
    for (auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        throw input_error(index + ": weight_map[\"" + tensor + "\"] must name a file in the folder");
      files.insert(file.get<std::string>());
    }
    for (auto& f : files) {
      if (!std::filesystem::exists(dir + "/" + f)) throw input_error(index + ": lists " + f + ", which is not in the folder");
      paths.push_back(dir + "/" + f);
    }
    return paths;
  }
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

safetensors_file::safetensors_file(const std::string& path) : path_(path) {
  {
    const regular_file f(path, max_weights_file_bytes, "safetensors file");
    size_ = f.size();
    if (size_ < 8) throw input_error(path + ": too short to be a safetensors file");
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, f.fd(), 0);
  }
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw input_error(path + ": mmap failed: " + std::strerror(errno));
  }
  try {
    read_header();
  } catch (...) {  // the destructor does not run for a constructor that throws
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

void safetensors_file::read_header() {
  const std::string& path = path_;
  const auto* bytes = static_cast<const std::uint8_t*>(map_);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  if (header_len > size_ - 8) throw input_error(path + ": header length " + std::to_string(header_len) + " exceeds the file");
  const nlohmann::json header =
      parse_json(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len), path + ": header");
  if (!header.is_object()) throw input_error(path + ": header is not a JSON object");
  const std::uint8_t* data = bytes + 8 + header_len;
  const std::size_t data_len = size_ - 8 - header_len;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      tensor_info t;
      t.name = name;
      t.file = path;
      t.dtype_name = v.at("dtype").get<std::string>();
      t.shape = integers<std::int64_t>(v.at("shape"), path, name, "shape");
      std::uint64_t elements = 1;
      for (auto d : t.shape)
        if (d < 0 || __builtin_mul_overflow(elements, std::uint64_t(d), &elements) || elements > (std::uint64_t(1) << 48))
          throw input_error(path + ": tensor '" + name + "' has an impossible shape");
      auto off = integers<std::uint64_t>(v.at("data_offsets"), path, name, "data_offsets");
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_len)
        throw input_error(path + ": tensor '" + name + "' has data_offsets outside the file");
      std::size_t es = stored_size(t.dtype_name);
      if (es == 0) throw input_error(path + ": tensor '" + name + "' has unknown dtype " + t.dtype_name);
      if (std::uint64_t(t.numel()) * es != off[1] - off[0])
        throw input_error(path + ": tensor '" + name + "' holds " + std::to_string(off[1] - off[0]) +
                          " bytes but its dtype and shape need " + std::to_string(t.numel() * es));
      t.data = data + off[0];
      t.bytes = off[1] - off[0];
      tensors_.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      throw input_error(path + ": tensor '" + name + "' has a malformed header entry: " + e.what());
    }
  }
  // Two tensors over the same bytes are a corrupt (or crafted) table, never a real file: a write
  // to one would be the other's too, and the output changes silently.
  std::vector<const tensor_info*> by_offset;
  for (const auto& [name, t] : tensors_)
    if (t.bytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const tensor_info* a, const tensor_info* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->data + by_offset[i - 1]->bytes > by_offset[i]->data)
      throw input_error(path + ": tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap (data_offsets " +
                        std::to_string(by_offset[i - 1]->data - data) + " + " + std::to_string(by_offset[i - 1]->bytes) +
                        " bytes and " + std::to_string(by_offset[i]->data - data) + ")");
  if (auto m = header.find("__metadata__"); m != header.end() && m->is_object()) read_formats(*m);
}

void safetensors_file::read_formats(const nlohmann::json& metadata) {
  const std::string prefix = format_metadata_key("");
  for (auto& [key, v] : metadata.items()) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string name = key.substr(prefix.size()), format = v.is_string() ? v.get<std::string>() : v.dump();
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw input_error(path_ + ": metadata '" + key + "' names no tensor of the file");
    tensor_info& t = it->second;
    t.quant = kernels::parse_quant_type(format);
    t.kquant = kernels::parse_kquant_type(format);
    if ((!t.quant && !t.kquant) || t.quant == kernels::quant_type::int8)
      throw input_error(path_ + ": tensor '" + name + "' has format '" + format +
                        "' in the metadata; known: q8_0, q4_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs");
    if (t.dtype_name != "U8" || t.shape.size() != 2)
      throw input_error(path_ + ": tensor '" + name + "' is " + t.dtype_name + " of " + std::to_string(t.shape.size()) +
                        " dimensions; a " + format + " tensor is U8 rows of its blocks");
  }
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, size_);
}

void safetensors_writer::declare(const std::string& name, dtype type, std::vector<std::int64_t> shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= std::size_t(d);
  entries_.push_back({name, stored_name(type), std::move(shape), n * kernels::dtype_size(type)});
}

void safetensors_writer::declare_stored(const std::string& name, const std::string& dtype_name, std::vector<std::int64_t> shape) {
  std::size_t n = stored_size(dtype_name);
  if (n == 0) throw std::invalid_argument("safetensors_writer: unknown dtype " + dtype_name);
  for (auto d : shape) n *= std::size_t(d);
  entries_.push_back({name, dtype_name, std::move(shape), n});
}

void safetensors_writer::open(const std::string& path) {
  path_ = path;
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (auto& e : entries_) {
    header[e.name] = {{"dtype", e.dtype_name}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [k, v] : metadata_) header["__metadata__"][k] = v;
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // keep tensor data 8-byte aligned
  out_ = std::fopen(path.c_str(), "wb");
  if (!out_) throw input_error(path + ": cannot write: " + std::strerror(errno));
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = std::uint8_t(std::uint64_t(text.size()) >> (8 * i));
  std::fwrite(len, 1, 8, out_);
  std::fwrite(text.data(), 1, text.size(), out_);
}

void safetensors_writer::write(const void* data, std::size_t bytes) {
  if (std::fwrite(data, 1, bytes, out_) != bytes) throw input_error(path_ + ": write failed: " + std::strerror(errno));
}

void safetensors_writer::close() {
  if (out_ && std::fclose(out_) != 0) {
    out_ = nullptr;
    throw input_error(path_ + ": close failed: " + std::strerror(errno));
  }
  out_ = nullptr;
}

safetensors_writer::~safetensors_writer() {
  if (out_) std::fclose(out_);
}

}  // namespace troupe::model
