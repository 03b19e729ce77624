#include "kernels/cpu/swiglu.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

void swiglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out) {
  // exp dominates: spread the work over the threads in pieces of a row (each element is
  // independent), so one decode row is not one thread's 5,632 exps while the other waits.
  constexpr std::size_t piece = 1024;
  const std::size_t pieces = (dim + piece - 1) / piece;
  parallel_for(rows * pieces, [&](std::size_t t) {
    const std::size_t r = t / pieces, i0 = t % pieces * piece, i1 = std::min(dim, i0 + piece);
    const float* g = gate_up + r * 2 * dim;
    const float* u = g + dim;
    float* o = out + r * dim;
    for (std::size_t i = i0; i < i1; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
}

}  // namespace troupe::kernels
