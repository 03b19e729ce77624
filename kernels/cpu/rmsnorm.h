// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, row by row.
#pragma once
#include <cstddef>

namespace troupe::kernels {

// x, y: [rows][dim] (y may alias x); weight: [dim]. The mean is accumulated in double.
void rmsnorm(const float* x, std::size_t rows, std::size_t dim, const float* weight, float eps,
             float* y);

}  // namespace troupe::kernels
