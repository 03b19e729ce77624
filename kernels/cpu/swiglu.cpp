#include "kernels/cpu/swiglu.h"

#include <cmath>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

void swiglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out) {
  // exp dominates: spread rows over the threads (each element is independent).
  parallel_for(rows, [&](std::size_t r) {
    const float* g = gate_up + r * 2 * dim;
    const float* u = g + dim;
    float* o = out + r * dim;
    for (std::size_t i = 0; i < dim; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
}

}  // namespace troupe::kernels
