#include "runtime/kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace troupe::kv {

using kernels::dtype;

kv_cache_config kv_cache_config::for_layers(int first, int last) const {
  kv_cache_config c = *this;
  if (layer_group.empty()) return c;
  c.layer_group.assign(layer_group.begin() + first, layer_group.begin() + last);
  c.layer_slot.assign(layer_slot.begin() + first, layer_slot.begin() + last);
  return c;
}

kv_cache::kv_cache(const kv_cache_config& cfg, int num_layers, int n_kv_heads, int head_dim)
    : cfg_(cfg), layers_(num_layers), n_kv_(n_kv_heads), hd_(head_dim) {
  if (split() && (cfg.layer_group.size() != std::size_t(num_layers) || cfg.layer_slot.size() != std::size_t(num_layers)))
    throw std::logic_error("kv_cache: window groups given for " + std::to_string(cfg.layer_group.size()) + " layers, the cache has " +
                           std::to_string(num_layers));
  layer_bytes_ = std::size_t(cfg.num_blocks) * block_bytes();
  // Zero-filled so a bug that reads an unwritten slot is deterministic, not garbage.
  const std::size_t bytes = 2 * layer_bytes_ * std::size_t(num_slots());
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

namespace {

// One head's row as int8 quants and an f16 scale (the largest magnitude maps to 127; the scale
// is rounded to f16 first, so the quants are chosen against the scale that is read back).
void quantize_head(const float* x, int hd, std::uint8_t* out) {
  float amax = 0;
  for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
  const std::uint16_t h = kernels::f32_to_f16(amax / 127.0f);
  const float scale = kernels::f16_to_f32(h), inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < hd; ++i) out[i] = std::uint8_t(std::int8_t(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f)));
  std::memcpy(out + hd, &h, 2);
}

void dequantize_head(const std::uint8_t* in, int hd, float* x) {
  std::uint16_t h;
  std::memcpy(&h, in + hd, 2);
  const float scale = kernels::f16_to_f32(h);
  for (int i = 0; i < hd; ++i) x[i] = float(std::int8_t(in[i])) * scale;
}

}  // namespace

void kv_cache::write(int layer, std::int32_t block, int slot, const float* k_row, const float* v_row) {
  const std::size_t row = std::size_t(n_kv_) * hd_;
  const std::size_t first = (std::size_t(block) * cfg_.block_size + slot) * row;
  std::uint8_t* k = this->k(layer);
  std::uint8_t* v = this->v(layer);
  if (cfg_.type == dtype::int8) {
    const std::size_t rb = kernels::kv_row_bytes(dtype::int8, std::size_t(hd_));
    const std::size_t at = (std::size_t(block) * cfg_.block_size + slot) * n_kv_ * rb;
    for (int h = 0; h < n_kv_; ++h) {
      quantize_head(k_row + h * hd_, hd_, k + at + h * rb);
      quantize_head(v_row + h * hd_, hd_, v + at + h * rb);
    }
    return;
  }
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
  if (cfg_.type == dtype::int8) {
    const std::size_t rb = kernels::kv_row_bytes(dtype::int8, std::size_t(hd_));
    const std::size_t at = (std::size_t(block) * cfg_.block_size + slot) * n_kv_ * rb;
    for (int h = 0; h < n_kv_; ++h) {
      dequantize_head(k + at + h * rb, hd_, k_row + h * hd_);
      dequantize_head(v + at + h * rb, hd_, v_row + h * hd_);
    }
    return;
  }
  for (std::size_t i = 0; i < row; ++i) {
    k_row[i] = kernels::load_as_f32(k, cfg_.type, first + i);
    v_row[i] = kernels::load_as_f32(v, cfg_.type, first + i);
  }
}

int kv_cache::num_slots() const {
  return split() ? 1 + *std::max_element(cfg_.layer_slot.begin(), cfg_.layer_slot.end()) : layers_;
}

std::size_t kv_cache::bytes_per_token() const { return bytes_per_token(cfg_.type, layers_, n_kv_, hd_); }

std::size_t kv_cache::bytes_per_token(dtype type, int num_layers, int n_kv_heads, int head_dim) {
  return 2 * std::size_t(num_layers) * std::size_t(n_kv_heads) * kernels::kv_row_bytes(type, std::size_t(head_dim));
}

int kv_cache::blocks_in(std::size_t bytes, int block_size, dtype type, int num_layers, int n_kv_heads,
                        int head_dim) {
  const std::size_t per_block = bytes_per_token(type, num_layers, n_kv_heads, head_dim) * std::size_t(block_size);
  return static_cast<int>(bytes / per_block);
}

}  // namespace troupe::kv
