// Rotary position embedding in the Hugging Face "rotate half" layout: element i of a head is
// paired with element i + rotary_dim/2. Partial rotary (Phi-4-mini) rotates only a head's first
// rotary_dim elements and leaves the rest as they are.
#pragma once
#include <cstddef>

namespace troupe::kernels {

// x: [tokens][heads][head_dim], rotated in place. cos, sin: [tokens][rotary_dim / 2], the angle
// pos(t) * inv_freq[i] already evaluated (see rope_tables()). rotary_dim: even, at most head_dim.
void rope(float* x, std::size_t tokens, std::size_t heads, std::size_t head_dim, std::size_t rotary_dim,
          const float* cos, const float* sin);
// Every element of each head rotated (rotary_dim = head_dim).
inline void rope(float* x, std::size_t tokens, std::size_t heads, std::size_t head_dim, const float* cos,
                 const float* sin) {
  rope(x, tokens, heads, head_dim, head_dim, cos, sin);
}

// Fills cos/sin ([tokens][head_dim/2]) for the given positions; angles computed in double.
void rope_tables(const int* positions, std::size_t tokens, const double* inv_freq,
                 std::size_t half_dim, float* cos, float* sin);

}  // namespace troupe::kernels
