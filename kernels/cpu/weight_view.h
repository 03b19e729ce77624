// What the per-ISA kernels see of a packed_weight: a plain struct, so no owning or templated
// standard-library type crosses into translation units built with wider instruction sets.
#pragma once
#include <cstddef>

#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

struct weight_view {
  dtype type;
  std::size_t n, k, panels;  // out features, in features, ceil(n / 16)
  const void* data;          // panel layout, see packed_weight.h
};

}  // namespace troupe::kernels
