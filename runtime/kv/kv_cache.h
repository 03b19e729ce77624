// The KV tensors of every layer, in blocks: layer l, block b, slot s, KV head h is row
// (b * block_size + s) * n_kv_heads + h of k(l) / v(l), kv_row_bytes(type, head_dim) bytes (an
// int8 row: head_dim quants, then its f16 scale). All of it is one
// region (kv_region.h): K of layer l, then V of layer l, for l in order, each num_blocks blocks,
// so one block of one layer's K or V is block_bytes() contiguous bytes at a fixed offset
// (block_offset) that another process mapping the region computes the same way.
//
// Split by window groups (window_groups.h), a block is a page and the region holds K and V of
// each page slot instead of each layer: layer l reads and writes slot layer_slot[l], with the
// block ids of its group's table. Transfers address layers, so only unsplit caches are sent or
// received (the engine hands a split replica's requests on without their KV).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dtype.h"
#include "runtime/kv/kv_region.h"

namespace troupe::kv {

struct kv_cache_config {
  int num_blocks = 0;
  int block_size = 16;  // tokens per block
  kernels::dtype type = kernels::dtype::f32;
  // In a shared-memory segment other processes on this host can map (transfer/pull.h).
  bool shared = false;
  // Window groups (window_groups.h) of this cache's layers: each one's group and page slot.
  // Empty: not split (every layer in group 0, its own slot).
  std::vector<std::int32_t> layer_group, layer_slot;

  // The same geometry for layers [first, last) of the model (a pipeline stage's cache).
  kv_cache_config for_layers(int first, int last) const;
};

class kv_cache {
 public:
  kv_cache(const kv_cache_config& cfg, int num_layers, int n_kv_heads, int head_dim);

  const kv_cache_config& config() const { return cfg_; }
  int block_size() const { return cfg_.block_size; }
  kernels::paged_kv_layer layer(int l) const;

  // Writes the K and V rows ([n_kv_heads * head_dim] f32 each) of one token into a slot (int8:
  // each head's row quantized with its own scale, max|x| / 127).
  void write(int layer, std::int32_t block, int slot, const float* k_row, const float* v_row);

  // Reads the K and V rows of one slot as f32 (what was stored: exact for f16 and bf16, each
  // quant times its row's scale for int8, the values attention reads).
  void read(int layer, std::int32_t block, int slot, float* k_row, float* v_row) const;

  int num_layers() const { return layers_; }
  bool split() const { return !cfg_.layer_group.empty(); }
  int group(int layer) const { return split() ? cfg_.layer_group[std::size_t(layer)] : 0; }
  int slot(int layer) const { return split() ? cfg_.layer_slot[std::size_t(layer)] : layer; }
  int n_kv_heads() const { return n_kv_; }
  int head_dim() const { return hd_; }
  // One block of one layer's K (kv = 0) or V (kv = 1): its bytes and where they start.
  std::size_t block_bytes() const { return std::size_t(cfg_.block_size) * n_kv_ * kernels::kv_row_bytes(cfg_.type, std::size_t(hd_)); }
  static std::size_t block_offset(int layer, int kv, std::int32_t block, int num_blocks, std::size_t block_bytes) {
    return ((std::size_t(layer) * 2 + std::size_t(kv)) * std::size_t(num_blocks) + std::size_t(block)) * block_bytes;
  }
  std::uint8_t* block_data(int layer, int kv, std::int32_t block) {
    return region_->data() + block_offset(slot(layer), kv, block, cfg_.num_blocks, block_bytes());
  }
  const std::uint8_t* block_data(int layer, int kv, std::int32_t block) const {
    return region_->data() + block_offset(slot(layer), kv, block, cfg_.num_blocks, block_bytes());
  }
  const kv_region& region() const { return *region_; }

  // Page slots the region holds (num_layers unless split).
  int num_slots() const;
  // Bytes of KV for one token across all layers: this cache's, or any geometry's.
  std::size_t bytes_per_token() const;
  static std::size_t bytes_per_token(kernels::dtype type, int num_layers, int n_kv_heads, int head_dim);
  // How many blocks fit in `bytes`.
  static int blocks_in(std::size_t bytes, int block_size, kernels::dtype type, int num_layers,
                       int n_kv_heads, int head_dim);

 private:
  kv_cache_config cfg_;
  int layers_, n_kv_, hd_;
  std::unique_ptr<kv_region> region_;
  std::uint8_t* k(int l) const { return region_->data() + (std::size_t(slot(l)) * 2) * layer_bytes_; }
  std::uint8_t* v(int l) const { return region_->data() + (std::size_t(slot(l)) * 2 + 1) * layer_bytes_; }
  std::size_t layer_bytes_;
};

}  // namespace troupe::kv
