#include "runtime/kv/kv_event_codec.h"

#include <msgpack.hpp>

#include <cstring>

namespace troupe::kv {

namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

void pack_hashes(packer& pk, const std::vector<block_hash>& hs) {
  pk.pack_array(std::uint32_t(hs.size()));
  for (auto h : hs) pk.pack_uint64(h);
}

// Always a float64, as vLLM's `ts: float` expects: msgpack-c's pack_double writes a double
// with an integral value as an integer.
void pack_float64(msgpack::sbuffer& buf, double d) {
  std::uint64_t bits;
  std::memcpy(&bits, &d, 8);
  char out[9];
  out[0] = char(0xcb);
  for (int i = 0; i < 8; ++i) out[1 + i] = char(bits >> (56 - 8 * i));
  buf.write(out, sizeof out);
}

void pack_medium(packer& pk, const std::string& medium) { pk.pack(medium == "gpu" || medium.empty() ? std::string("GPU") : medium); }

}  // namespace

std::string encode_kv_event_batch(const kv_event_batch& b) {
  msgpack::sbuffer buf;
  packer pk(buf);
  pk.pack_array(4);
  pack_float64(buf, b.timestamp);
  pk.pack_array(std::uint32_t(b.events.size()));
  for (const auto& e : b.events) {
    switch (e.kind) {
      case kv_event_kind::stored:
        pk.pack_array(7);
        pk.pack(std::string("BlockStored"));
        pack_hashes(pk, e.hashes);
        if (e.has_parent)
          pk.pack_uint64(e.parent);
        else
          pk.pack_nil();
        pk.pack_array(std::uint32_t(e.token_ids.size()));
        for (auto t : e.token_ids) pk.pack_int32(t);
        pk.pack_int32(e.block_size);
        pk.pack_nil();  // lora_id
        pack_medium(pk, e.medium);
        break;
      case kv_event_kind::removed:
        pk.pack_array(3);
        pk.pack(std::string("BlockRemoved"));
        pack_hashes(pk, e.hashes);
        pack_medium(pk, e.medium);
        break;
      case kv_event_kind::cleared:
        pk.pack_array(1);
        pk.pack(std::string("AllBlocksCleared"));
        break;
    }
  }
  pk.pack_uint32(b.replica.value);
  pk.pack(std::string(kernels::dtype_name(b.kv_type)));
  return std::string(buf.data(), buf.size());
}

}  // namespace troupe::kv
