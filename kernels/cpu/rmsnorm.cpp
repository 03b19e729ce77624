#include "kernels/cpu/rmsnorm.h"

#include <cmath>

namespace troupe::kernels {

void rmsnorm(const float* x, std::size_t rows, std::size_t dim, const float* weight, float eps,
             float* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (std::size_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    // Same rounding points as the PyTorch reference: inverse RMS in f32, then two f32 products.
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (std::size_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
  }
}

}  // namespace troupe::kernels
