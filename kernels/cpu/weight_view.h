// What the per-ISA kernels see of a packed_weight: a plain struct, so no owning or templated
// standard-library type crosses into translation units built with wider instruction sets.
#pragma once
#include <cstddef>

#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

constexpr std::size_t panel_width = 16;       // output features per panel (one vector)
constexpr std::size_t panels_per_group = 4;   // panels whose rows are interleaved
constexpr std::size_t group_width = panel_width * panels_per_group;

// Element offset of (row 0, lane 0) of panel p in a packed weight with k_dim rows.
constexpr std::size_t panel_offset(std::size_t p, std::size_t k_dim) {
  return (p / panels_per_group) * k_dim * group_width + (p % panels_per_group) * panel_width;
}

struct weight_view {
  dtype type;
  std::size_t n, k, panels;  // out features, in features, ceil(n / 64) * 4
  const void* data;          // panel layout, see packed_weight.h
};

}  // namespace troupe::kernels
