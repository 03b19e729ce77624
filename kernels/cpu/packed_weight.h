// A linear layer's weight re-laid out for the matmul kernels.
//
// Hugging Face stores a linear weight as W[n][k] (out_features x in_features). The kernels want
// column panels: 16 output features side by side for every k, so one vector load feeds 16
// outputs and each output accumulates over k in order (which makes results independent of
// batch size). Panels come in groups of 4 (64 features) whose rows are interleaved, so a tile
// of 4 panels streams one contiguous run of memory:
//   panel p, row k, lane j  ->  data[((p / 4) * k_dim + k) * 64 + (p % 4) * 16 + j] = W[p*16+j][k]
// zero for p*16+j >= n. Weights keep their stored dtype (f32, f16 or bf16).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/weight_view.h"

namespace troupe::kernels {

struct packed_weight {
  dtype type = dtype::f32;
  std::size_t n = 0;  // output features
  std::size_t k = 0;  // input features
  std::size_t panels = 0;  // ceil(n / 64) * 4
  std::shared_ptr<std::uint8_t[]> data;  // 64-byte aligned, panels * k * 16 elements

  std::size_t bytes() const { return panels * k * panel_width * dtype_size(type); }
  weight_view view() const { return {type, n, k, panels, data.get()}; }
  // Element (row k, lane 0) of panel p; the next k is group_width elements further.
  const void* panel_ptr(std::size_t p) const { return data.get() + panel_offset(p, k) * dtype_size(type); }
};

// `size` bytes for a weight the kernels stream: 2 MiB aligned huge pages when that large.
std::shared_ptr<std::uint8_t[]> alloc_weight_bytes(std::size_t size);

// Packs w[n][k] (row-major, element type t). Never fails for n, k > 0.
packed_weight pack_weight(const void* w, dtype t, std::size_t n, std::size_t k);

// Element (row, col) of the original W, for tests and debugging.
float packed_at(const packed_weight& pw, std::size_t row, std::size_t col);

}  // namespace troupe::kernels
