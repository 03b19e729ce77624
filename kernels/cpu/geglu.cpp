// GeGLU, in scalar code: one tanh per element, which the compiler does not vectorize; Gemma is
// the one family that runs it. A vector tanh in the manner of swiglu.cpp's exp is a later step
// if profiles show it.
#include "kernels/cpu/geglu.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

float gelu_tanh(float g) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g)));
}

void geglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out) {
  constexpr std::size_t piece = 1024;  // pieces of a row over the threads, as swiglu
  const std::size_t pieces = (dim + piece - 1) / piece;
  parallel_for(rows * pieces, [&](std::size_t t) {
    const std::size_t r = t / pieces, i0 = t % pieces * piece, i1 = std::min(dim, i0 + piece);
    const float* g = gate_up + r * 2 * dim;
    for (std::size_t i = i0; i < i1; ++i) out[r * dim + i] = gelu_tanh(g[i]) * g[dim + i];
  });
}

}  // namespace troupe::kernels
