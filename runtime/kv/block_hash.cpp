#include "runtime/kv/block_hash.h"

#include <cstring>
#include <string>

namespace troupe::kv {

namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct sip {
  std::uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
};

std::uint64_t load_le(const std::uint8_t* p, std::size_t n) {
  std::uint64_t x = 0;
  for (std::size_t i = 0; i < n; ++i) x |= std::uint64_t(p[i]) << (8 * i);
  return x;
}

void put_le(std::vector<std::uint8_t>& out, std::uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(std::uint8_t(x >> (8 * i)));
}

}  // namespace

std::uint64_t siphash(std::span<const std::uint8_t> in) {
  static const std::uint8_t key[16] = {'t', 'r', 'o', 'u', 'p', 'e', ' ', 'p', 'r', 'e', 'f', 'i', 'x', ' ', 'v', '1'};
  return siphash(key, in);
}

std::uint64_t siphash(const std::uint8_t (&key)[16], std::span<const std::uint8_t> in) {
  const std::uint64_t k0 = load_le(key, 8), k1 = load_le(key + 8, 8);
  sip s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull};
  const std::size_t n = in.size(), whole = n & ~std::size_t(7);
  for (std::size_t i = 0; i < whole; i += 8) {
    const std::uint64_t m = load_le(in.data() + i, 8);
    s.v3 ^= m;
    s.round();
    s.round();
    s.v0 ^= m;
  }
  const std::uint64_t last = (std::uint64_t(n & 0xff) << 56) | load_le(in.data() + whole, n - whole);
  s.v3 ^= last;
  s.round();
  s.round();
  s.v0 ^= last;
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

block_hash root_hash(std::string_view model_key) {
  std::vector<std::uint8_t> b;
  put_le(b, 0x726f6f74, 8);
  b.insert(b.end(), model_key.begin(), model_key.end());
  return siphash(b);
}

block_hash root_hash(std::string_view model_key, std::string_view adapter) {
  if (adapter.empty()) return root_hash(model_key);
  std::string key(model_key);
  key += "+lora:";
  key += adapter;
  return root_hash(key);
}

std::uint64_t salt_key(std::string_view salt) {
  if (salt.empty()) return 0;
  const std::uint64_t h = siphash({reinterpret_cast<const std::uint8_t*>(salt.data()), salt.size()});
  return h ? h : 1;
}

block_hash chain_hash(block_hash parent, std::uint64_t extra, std::span<const std::int32_t> tokens) {
  std::vector<std::uint8_t> b;
  b.reserve(16 + 4 * tokens.size());
  put_le(b, parent, 8);
  put_le(b, extra, 8);
  for (auto t : tokens) put_le(b, std::uint32_t(t), 4);
  return siphash(b);
}

void extend_block_hashes(std::vector<block_hash>& hashes, std::span<const std::int32_t> tokens, int block_size,
                         const hash_keys& keys) {
  const std::size_t full = tokens.size() / std::size_t(block_size);
  for (std::size_t i = hashes.size(); i < full; ++i) {
    const block_hash parent = i == 0 ? keys.root : hashes[i - 1];
    const bool shared = int((i + 1) * std::size_t(block_size)) <= keys.public_tokens;
    hashes.push_back(chain_hash(parent, shared ? 0 : keys.tenant, tokens.subspan(i * std::size_t(block_size), std::size_t(block_size))));
  }
}

}  // namespace troupe::kv
