// The KV tensors of every layer, in blocks: layer l, block b, slot s, KV head h starts at
// element ((b * block_size + s) * n_kv_heads + h) * head_dim of k(l) / v(l).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/dtype.h"

namespace troupe::kv {

struct kv_cache_config {
  int num_blocks = 0;
  int block_size = 16;  // tokens per block
  kernels::dtype type = kernels::dtype::f32;
};

class kv_cache {
 public:
  kv_cache(const kv_cache_config& cfg, int num_layers, int n_kv_heads, int head_dim);

  const kv_cache_config& config() const { return cfg_; }
  int block_size() const { return cfg_.block_size; }
  kernels::paged_kv_layer layer(int l) const;

  // Writes the K and V rows ([n_kv_heads * head_dim] f32 each) of one token into a slot.
  void write(int layer, std::int32_t block, int slot, const float* k_row, const float* v_row);

  // Reads the K and V rows of one slot as f32 (exact for f16 and bf16).
  void read(int layer, std::int32_t block, int slot, float* k_row, float* v_row) const;

  // A sequence's KV moved between caches (prefill on one replica, decode on another): the first
  // `positions` tokens of the sequence whose blocks are `table`, every layer of this cache, as
  // f32 laid out [layer][position][K row, V row]. kv_floats() is the size of that.
  std::size_t kv_floats(int positions) const { return std::size_t(layers_) * positions * 2 * n_kv_ * hd_; }
  void export_kv(const std::int32_t* table, int positions, float* out) const;
  void import_kv(const std::int32_t* table, int positions, const float* in);

  // Bytes of KV for one token across all layers.
  std::size_t bytes_per_token() const;
  // How many blocks fit in `bytes`.
  static int blocks_in(std::size_t bytes, int block_size, kernels::dtype type, int num_layers,
                       int n_kv_heads, int head_dim);

 private:
  kv_cache_config cfg_;
  int layers_, n_kv_, hd_;
  std::size_t layer_elems_;
  std::vector<std::unique_ptr<std::uint8_t[]>> k_, v_;
};

}  // namespace troupe::kv
