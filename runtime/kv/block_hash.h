// The prefix cache's block identity: a chained 64-bit hash of (the parent block's hash, the
// block's extra key, the block's token ids), rooted in the model's identity. Two blocks have the
// same hash only if every token before them and in them, the model, and every extra key on the
// way (tenant salt, adapter) are the same, so a hash names KV contents exactly.
//
// The function is fixed so that every process, run and host computes the same hashes (the
// router's index and external KV-event consumers compare them): SipHash-2-4 with the 16-byte
// key "troupe prefix v1", over little-endian words:
//   root  = siphash(u64 0x726f6f74 ("root"), model key bytes)
//   block = siphash(u64 parent, u64 extra, each token id as u32)
// where the model key is "<model id>@<revision>" (with a LoRA adapter, "<model id>@<revision>
// +lora:<adapter identity>", so that no block of one adapter or of the base is found for another,
// public prefixes included) and extra is 0 for a block shared by every
// tenant (a public prefix) or siphash of the tenant salt otherwise. Hashes travel as int64 on
// the wire (vLLM's KV events carry them as integers).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace troupe::kv {

using block_hash = std::uint64_t;

// SipHash-2-4 with the fixed key, over `bytes`.
std::uint64_t siphash(std::span<const std::uint8_t> bytes);
// SipHash-2-4 with any 16-byte key (the fixed one above; tests check the published vectors).
std::uint64_t siphash(const std::uint8_t (&key)[16], std::span<const std::uint8_t> bytes);

// The root every chain of a model starts from.
block_hash root_hash(std::string_view model_key);
// The root of a model's chains run with a LoRA adapter (model::lora_identity); the model's own
// root when `adapter` is empty.
block_hash root_hash(std::string_view model_key, std::string_view adapter);

// The extra key of a tenant's blocks: 0 for the empty salt (shared), otherwise never 0.
std::uint64_t salt_key(std::string_view salt);

// One block's hash.
block_hash chain_hash(block_hash parent, std::uint64_t extra, std::span<const std::int32_t> tokens);

// How a request's blocks are keyed: the model's root, the tenant's extra key, and how many
// leading tokens are a public prefix (blocks wholly inside it use extra 0, shared by all).
struct hash_keys {
  block_hash root = 0;
  std::uint64_t tenant = 0;
  int public_tokens = 0;
};

// Extends `hashes` to cover every full block of `tokens` (block i covers tokens
// [i * block_size, (i + 1) * block_size)); the ones already there are kept.
void extend_block_hashes(std::vector<block_hash>& hashes, std::span<const std::int32_t> tokens, int block_size,
                         const hash_keys& keys);

}  // namespace troupe::kv
