#include "runtime/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant.h"
#include "runtime/common/error.h"
#include "runtime/common/regular_file.h"

namespace troupe::model {

std::string ggml_type_name(std::uint32_t t) {
  static const char* names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "type 4", "type 5", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
                                "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
                                "BF16"};
  if (t < sizeof(names) / sizeof(names[0])) return names[t];
  return "type " + std::to_string(t);
}

namespace {

// Elements per block and bytes per block of the readable types.
std::optional<std::pair<std::size_t, std::size_t>> block_of(std::uint32_t t) {
  switch (t) {
    case std::uint32_t(ggml_type::f32): return std::pair<std::size_t, std::size_t>{1, 4};
    case std::uint32_t(ggml_type::f16): return std::pair<std::size_t, std::size_t>{1, 2};
    case std::uint32_t(ggml_type::bf16): return std::pair<std::size_t, std::size_t>{1, 2};
    case std::uint32_t(ggml_type::q4_0): return std::pair{kernels::quant_block, kernels::quant_row_bytes(kernels::quant_type::q4_0, kernels::quant_block)};
    case std::uint32_t(ggml_type::q8_0): return std::pair{kernels::quant_block, kernels::quant_row_bytes(kernels::quant_type::q8_0, kernels::quant_block)};
  }
  if (auto k = kernels::kquant_of_ggml(t)) return std::pair{kernels::kquant_block, kernels::kquant_block_bytes(*k)};
  return std::nullopt;
}

// A cursor over the mapped bytes that fails with the offset and what it was reading.
class reader {
 public:
  reader(const std::uint8_t* p, std::size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  std::size_t pos() const { return pos_; }
  const std::uint8_t* at(std::size_t off) const { return p_ + off; }

  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const auto len = get<std::uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), std::size_t(len));
    pos_ += std::size_t(len);
    return s;
  }
  void need(std::uint64_t bytes, const char* what) const {
    if (bytes > n_ - pos_)
      throw input_error(path_ + ": truncated: " + what + " at byte " + std::to_string(pos_) + " needs " + std::to_string(bytes) +
                        " bytes, the file has " + std::to_string(n_ - pos_) + " left");
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_, pos_ = 0;
  const std::string& path_;
};

nlohmann::json value_of(reader& r, std::uint32_t type, const std::string& key, const std::string& path, int depth = 0) {
  switch (type) {
    case 0: return r.get<std::uint8_t>("a u8 value");
    case 1: return r.get<std::int8_t>("an i8 value");
    case 2: return r.get<std::uint16_t>("a u16 value");
    case 3: return r.get<std::int16_t>("an i16 value");
    case 4: return r.get<std::uint32_t>("a u32 value");
    case 5: return r.get<std::int32_t>("an i32 value");
    case 6: return r.get<float>("an f32 value");
    case 7: return r.get<std::uint8_t>("a bool value") != 0;
    case 8: return r.str("a string value");
    case 10: return r.get<std::uint64_t>("a u64 value");
    case 11: return r.get<std::int64_t>("an i64 value");
    case 12: return r.get<double>("an f64 value");
    case 9: {
      if (depth > 0) throw input_error(path + ": metadata '" + key + "' nests arrays, which GGUF models do not use");
      const auto elem = r.get<std::uint32_t>("an array's element type");
      const auto count = r.get<std::uint64_t>("an array's length");
      r.need(count, "an array's elements");  // every element takes at least one byte
      nlohmann::json a = nlohmann::json::array();
      for (std::uint64_t i = 0; i < count; ++i) a.push_back(value_of(r, elem, key, path, depth + 1));
      return a;
    }
  }
  throw input_error(path + ": metadata '" + key + "' has unknown value type " + std::to_string(type));
}

// A tensor in the file's table: what it is, and its offset from the start of the data.
struct entry {
  gguf_tensor t;
  std::uint64_t offset = 0;
};

// One tensor's table entry, its shape and type checked (`names`: those read so far).
entry read_entry(reader& r, const std::string& path, std::set<std::string>& names) {
  entry e;
  e.t.name = r.str("a tensor name");
  const auto dims = r.get<std::uint32_t>("a tensor's dimension count");
  if (dims == 0 || dims > 4) throw input_error(path + ": tensor '" + e.t.name + "' has " + std::to_string(dims) + " dimensions (1 to 4)");
  std::vector<std::int64_t> ne;
  std::uint64_t numel = 1;
  for (std::uint32_t d = 0; d < dims; ++d) {
    const auto v = r.get<std::uint64_t>("a tensor dimension");
    if (v == 0 || v > (std::uint64_t(1) << 40) || numel > (std::uint64_t(1) << 48) / v)
      throw input_error(path + ": tensor '" + e.t.name + "' has an impossible dimension " + std::to_string(v));
    numel *= v;
    ne.push_back(std::int64_t(v));
  }
  const auto type = r.get<std::uint32_t>("a tensor type");
  e.offset = r.get<std::uint64_t>("a tensor offset");
  const auto block = block_of(type);
  if (!block)
    throw input_error(path + ": tensor '" + e.t.name + "' has type " + ggml_type_name(type) + "; supported: F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS");
  if (std::uint64_t(ne[0]) % block->first != 0)
    throw input_error(path + ": tensor '" + e.t.name + "' has rows of " + std::to_string(ne[0]) + " elements, not whole " +
                      ggml_type_name(type) + " blocks of " + std::to_string(block->first));
  e.t.type = ggml_type(type);
  e.t.shape.assign(ne.rbegin(), ne.rend());
  e.t.bytes = std::size_t(numel / block->first * block->second);
  if (!names.insert(e.t.name).second)
    throw input_error(path + ": tensor '" + e.t.name + "' appears twice");
  return e;
}

// Two tensors over the same bytes are a corrupt (or crafted) table, never a real file.
void check_no_overlap(const std::vector<entry>& entries, const std::string& path) {
  std::vector<const entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const entry* a, const entry* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->t.bytes > by_offset[i]->offset)
      throw input_error(path + ": tensors '" + by_offset[i - 1]->t.name + "' and '" + by_offset[i]->t.name +
                        "' overlap (offsets " + std::to_string(by_offset[i - 1]->offset) + " + " +
                        std::to_string(by_offset[i - 1]->t.bytes) + " bytes and " + std::to_string(by_offset[i]->offset) + ")");
}

}  // namespace

gguf_file::gguf_file(const std::string& path) : path_(path) {
  {
    const regular_file f(path, max_weights_file_bytes, "GGUF file");
    size_ = f.size();
    if (size_ > 0) map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, f.fd(), 0);
  }
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw input_error(path + ": mmap failed: " + std::strerror(errno));
  }
  reader r(static_cast<const std::uint8_t*>(map_), size_, path_);
  if (size_ < 4 || std::memcmp(map_, "GGUF", 4) != 0) throw input_error(path + ": not a GGUF file (bad magic; it must start with \"GGUF\")");
  r.get<std::uint32_t>("the magic");
  version_ = r.get<std::uint32_t>("the version");
  if (version_ != 2 && version_ != 3) throw input_error(path + ": GGUF version " + std::to_string(version_) + " (2 and 3 are read)");
  const auto n_tensors = r.get<std::uint64_t>("the tensor count");
  const auto n_kv = r.get<std::uint64_t>("the metadata count");
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = r.str("a metadata key");
    const auto type = r.get<std::uint32_t>("a metadata type");
    if (meta_.contains(key)) throw input_error(path + ": metadata '" + key + "' appears twice");
    meta_[key] = value_of(r, type, key, path_);
  }
  std::size_t alignment = 32;
  if (auto a = meta_.find("general.alignment"); a != meta_.end()) {
    if (!a->is_number_unsigned() || a->get<std::uint64_t>() == 0 || a->get<std::uint64_t>() > 4096)
      throw input_error(path + ": general.alignment must be a positive integer up to 4096");
    alignment = a->get<std::size_t>();
  }
  std::vector<entry> entries;
  std::set<std::string> names;
  for (std::uint64_t i = 0; i < n_tensors; ++i) entries.push_back(read_entry(r, path, names));
  const std::size_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
  check_no_overlap(entries, path);
  for (auto& e : entries) {
    if (e.offset % alignment != 0)
      throw input_error(path + ": tensor '" + e.t.name + "' starts at offset " + std::to_string(e.offset) + ", not a multiple of the alignment " +
                        std::to_string(alignment));
    if (data_start > size_ || e.offset > size_ - data_start || e.t.bytes > size_ - data_start - e.offset)
      throw input_error(path + ": truncated: tensor '" + e.t.name + "' needs bytes up to " +
                        std::to_string(data_start + e.offset + e.t.bytes) + ", the file has " + std::to_string(size_));
    e.t.file_offset = data_start + std::size_t(e.offset);
    e.t.data = r.at(e.t.file_offset);
    tensors_.emplace(e.t.name, std::move(e.t));
  }
}

gguf_file::~gguf_file() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace troupe::model
