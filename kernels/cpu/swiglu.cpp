// SwiGLU, compiled once per ISA (isa_sources): silu is one exp per element, and the scalar
// std::exp it replaced made SwiGLU 6% of a 512-token prefill, as much as attention's softmax.
#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/simd.h"

namespace troupe::kernels::TROUPE_ISA {

// silu(g) * u for 16 elements. exp16 wants x <= 0, so with e = e^-|g| (one exp):
//   silu(g) = (max(g, 0) + min(g, 0) * e) / (1 + e)
// which is g / (1 + e) for g >= 0 and g * e / (1 + e) below. The same IEEE steps on every ISA.
static inline vec16 silu_times(vec16 g, vec16 u) {
  const vec16 minus = splat16(-1.0f), zero = zero16();
  const vec16 e = exp16(mul16(max16(g, mul16(g, minus)), minus));
  const vec16 below = mul16(max16(mul16(g, minus), zero), minus);  // min(g, 0)
  return mul16(div16(add16(max16(g, zero), mul16(below, e)), add16(splat16(1.0f), e)), u);
}

void swiglu_run(const float* g, const float* u, std::size_t n, float* o) {
  map16(g, u, n, o, [](vec16 a, vec16 b) { return silu_times(a, b); });
}

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include <algorithm>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, swiglu_run, (const float*, const float*, std::size_t, float*))

namespace troupe::kernels {

void swiglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out) {
  // Spread over the threads in pieces of a row (each element is independent), so one decode
  // row is not one thread's 5,632 exps while the other waits.
  constexpr std::size_t piece = 1024;
  const std::size_t pieces = (dim + piece - 1) / piece;
  auto run = TROUPE_PICK_ISA(swiglu_run);
  parallel_for(rows * pieces, [&](std::size_t t) {
    const std::size_t r = t / pieces, i0 = t % pieces * piece, i1 = std::min(dim, i0 + piece);
    const float* g = gate_up + r * 2 * dim;
    run(g + i0, g + dim + i0, i1 - i0, out + r * dim + i0);
  });
}

}  // namespace troupe::kernels
#endif
