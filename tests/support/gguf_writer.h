// Writes GGUF files for tests (the format of runtime/model/gguf.h), including broken ones: the
// caller picks every field, so a test can name what it corrupts.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace troupe::test {

class gguf_writer {
 public:
  std::uint32_t version = 3;
  std::uint32_t alignment = 32;

  void u32(const std::string& key, std::uint32_t v) { kv(key, 4, pod(v)); }
  void i32(const std::string& key, std::int32_t v) { kv(key, 5, pod(v)); }
  void f32(const std::string& key, float v) { kv(key, 6, pod(v)); }
  void boolean(const std::string& key, bool v) { kv(key, 7, pod(std::uint8_t(v))); }
  void u64(const std::string& key, std::uint64_t v) { kv(key, 10, pod(v)); }
  void str(const std::string& key, const std::string& v) { kv(key, 8, string_bytes(v)); }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string b = pod(std::uint32_t(8)) + pod(std::uint64_t(v.size()));
    for (auto& s : v) b += string_bytes(s);
    kv(key, 9, b);
  }
  void f32s(const std::string& key, const std::vector<float>& v) { array(key, 6, v); }
  void i32s(const std::string& key, const std::vector<std::int32_t>& v) { array(key, 5, v); }
  // A raw value of any type number (for unknown-type tests).
  void raw(const std::string& key, std::uint32_t type, const std::string& bytes) { kv(key, type, bytes); }

  // A tensor of ggml type `type` with dimensions innermost first (ne[0] = row length).
  void tensor(const std::string& name, std::uint32_t type, std::vector<std::uint64_t> ne, std::string data) {
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
  }

  std::string bytes() const {
    std::string out = "GGUF" + pod(version) + pod(std::uint64_t(tensors_.size())) + pod(std::uint64_t(kvs_.size() + (alignment != 32)));
    for (auto& [key, k] : kvs_) out += k;
    if (alignment != 32) out += string_bytes("general.alignment") + pod(std::uint32_t(4)) + pod(alignment);
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (auto& t : tensors_) {
      out += string_bytes(t.name) + pod(std::uint32_t(t.ne.size()));
      for (auto d : t.ne) out += pod(d);
      out += pod(t.type) + pod(offset);
      offsets.push_back(offset);
      offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    const std::size_t start = out.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(start + offsets[i], '\0');
      out += tensors_[i].data;
    }
    return out;
  }

  void write(const std::string& path) const { std::ofstream(path, std::ios::binary) << bytes(); }

  template <class T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string string_bytes(const std::string& s) { return pod(std::uint64_t(s.size())) + s; }

 private:
  struct tensor_entry { std::string name; std::uint32_t type; std::vector<std::uint64_t> ne; std::string data; };
  // A key written again replaces its value (where it was), so a test can change one field.
  void kv(const std::string& key, std::uint32_t type, const std::string& value) {
    std::string entry = string_bytes(key) + pod(type) + value;
    for (auto& [k, e] : kvs_)
      if (k == key) {
        e = std::move(entry);
        return;
      }
    kvs_.emplace_back(key, std::move(entry));
  }
  template <class T>
  void array(const std::string& key, std::uint32_t elem, const std::vector<T>& v) {
    std::string b = pod(elem) + pod(std::uint64_t(v.size()));
    for (auto x : v) b += pod(x);
    kv(key, 9, b);
  }
  std::vector<std::pair<std::string, std::string>> kvs_;
  std::vector<tensor_entry> tensors_;
};

}  // namespace troupe::test
