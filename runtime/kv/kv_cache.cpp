#include "runtime/kv/kv_cache.h"

#include <cstring>
#include <stdexcept>

namespace troupe::kv {

using kernels::dtype;

kv_cache::kv_cache(const kv_cache_config& cfg, int num_layers, int n_kv_heads, int head_dim)
    : cfg_(cfg), layers_(num_layers), n_kv_(n_kv_heads), hd_(head_dim) {
  layer_elems_ = std::size_t(cfg.num_blocks) * cfg.block_size * n_kv_heads * head_dim;
  layer_bytes_ = layer_elems_ * kernels::dtype_size(cfg.type);
  // Zero-filled so a bug that reads an unwritten slot is deterministic, not garbage.
  const std::size_t bytes = 2 * layer_bytes_ * std::size_t(num_layers);
  if (cfg.shared) {
    try {
      region_ = kv_region::create_shared(new_segment_name(), bytes);
    } catch (const std::runtime_error&) {
      // No room in /dev/shm (a small container's): private memory, reachable over TCP only.
    }
  }
  if (!region_) region_ = kv_region::heap(bytes);
}

kernels::paged_kv_layer kv_cache::layer(int l) const {
  return {k(l), v(l), cfg_.type, cfg_.block_size, n_kv_, hd_};
}

void kv_cache::write(int layer, std::int32_t block, int slot, const float* k_row, const float* v_row) {
  const std::size_t row = std::size_t(n_kv_) * hd_;
  const std::size_t first = (std::size_t(block) * cfg_.block_size + slot) * row;
  std::uint8_t* k = this->k(layer);
  std::uint8_t* v = this->v(layer);
  if (cfg_.type == dtype::f32) {
    std::memcpy(k + first * 4, k_row, row * 4);
    std::memcpy(v + first * 4, v_row, row * 4);
    return;
  }
  for (std::size_t i = 0; i < row; ++i) {
    kernels::store_from_f32(k, cfg_.type, first + i, k_row[i]);
    kernels::store_from_f32(v, cfg_.type, first + i, v_row[i]);
  }
}

void kv_cache::read(int layer, std::int32_t block, int slot, float* k_row, float* v_row) const {
  const std::size_t row = std::size_t(n_kv_) * hd_;
  const std::size_t first = (std::size_t(block) * cfg_.block_size + slot) * row;
  const std::uint8_t* k = this->k(layer);
  const std::uint8_t* v = this->v(layer);
  for (std::size_t i = 0; i < row; ++i) {
    k_row[i] = kernels::load_as_f32(k, cfg_.type, first + i);
    v_row[i] = kernels::load_as_f32(v, cfg_.type, first + i);
  }
}

std::size_t kv_cache::bytes_per_token() const { return bytes_per_token(cfg_.type, layers_, n_kv_, hd_); }

std::size_t kv_cache::bytes_per_token(dtype type, int num_layers, int n_kv_heads, int head_dim) {
  return 2 * std::size_t(num_layers) * std::size_t(n_kv_heads) * std::size_t(head_dim) * kernels::dtype_size(type);
}

int kv_cache::blocks_in(std::size_t bytes, int block_size, dtype type, int num_layers, int n_kv_heads,
                        int head_dim) {
  const std::size_t per_block = bytes_per_token(type, num_layers, n_kv_heads, head_dim) * std::size_t(block_size);
  return static_cast<int>(bytes / per_block);
}

}  // namespace troupe::kv
