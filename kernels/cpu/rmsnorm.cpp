#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

void rmsnorm(const float* x, std::size_t rows, std::size_t dim, const float* weight, float eps,
             float* y) {
  auto one_row = [&](std::size_t r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (std::size_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    // Same rounding points as the PyTorch reference: inverse RMS in f32, then two f32 products.
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (std::size_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
  };
  if (rows < 8) {
    for (std::size_t r = 0; r < rows; ++r) one_row(r);
  } else {
    parallel_for(rows, one_row);
  }
}

}  // namespace troupe::kernels
