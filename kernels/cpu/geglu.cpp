// GeGLU, compiled once per ISA (isa_sources) as swiglu.cpp is. GELU's tanh form is a sigmoid,
// 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u), so each element costs two vector exps from simd.h where a
// scalar std::tanh per element was most of what Gemma's MLP cost beyond Llama's.
#include "kernels/cpu/geglu.h"

#include "kernels/cpu/simd.h"

namespace troupe::kernels::TROUPE_ISA {

// gelu_tanh(g) * u for 16 elements: g * sigmoid(z) * u with z = 2 sqrt(2/pi) (g + 0.044715 g^3),
// and sigmoid(z) = e^min(z, 0) / (1 + e^-|z|) (exp16 wants x <= 0). The same IEEE steps on every ISA.
static inline vec16 gelu_times(vec16 g, vec16 u) {
  const vec16 minus = splat16(-1.0f), zero = zero16();
  const vec16 cube = mul16(mul16(g, g), g);
  const vec16 z = mul16(splat16(2 * 0.7978845608028654f), fma16(cube, splat16(0.044715f), g));
  const vec16 minus_abs = mul16(max16(z, mul16(z, minus)), minus);  // -|z|
  const vec16 below = mul16(max16(mul16(z, minus), zero), minus);   // min(z, 0)
  const vec16 sigmoid = div16(exp16(below), add16(splat16(1.0f), exp16(minus_abs)));
  return mul16(mul16(g, sigmoid), u);
}

void geglu_run(const float* g, const float* u, std::size_t n, float* o) {
  map16(g, u, n, o, [](vec16 a, vec16 b) { return gelu_times(a, b); });
}

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, geglu_run, (const float*, const float*, std::size_t, float*))

namespace troupe::kernels {

float gelu_tanh(float g) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g)));
}

void geglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out) {
  constexpr std::size_t piece = 1024;  // pieces of a row over the threads, as swiglu
  const std::size_t pieces = (dim + piece - 1) / piece;
  auto run = TROUPE_PICK_ISA(geglu_run);
  parallel_for(rows * pieces, [&](std::size_t t) {
    const std::size_t r = t / pieces, i0 = t % pieces * piece, i1 = std::min(dim, i0 + piece);
    const float* g = gate_up + r * 2 * dim;
    run(g + i0, g + dim + i0, i1 - i0, out + r * dim + i0);
  });
}

}  // namespace troupe::kernels
#endif
