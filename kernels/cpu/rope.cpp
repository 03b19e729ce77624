#include "kernels/cpu/rope.h"

#include <cmath>

namespace troupe::kernels {

void rope(float* x, std::size_t tokens, std::size_t heads, std::size_t head_dim, std::size_t rotary_dim,
          const float* cos, const float* sin) {
  const std::size_t half = rotary_dim / 2;
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (std::size_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (std::size_t i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void rope_tables(const int* positions, std::size_t tokens, const double* inv_freq,
                 std::size_t half_dim, float* cos, float* sin) {
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t i = 0; i < half_dim; ++i) {
      double angle = double(positions[t]) * inv_freq[i];
      cos[t * half_dim + i] = static_cast<float>(std::cos(angle));
      sin[t * half_dim + i] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace troupe::kernels
