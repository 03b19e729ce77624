#include "kernels/cpu/linear_weight.h"

#include "kernels/cpu/gemv.h"

namespace troupe::kernels {

std::size_t linear_weight::bytes() const {
  if (auto* q = quantized()) return q->bytes();
  return plain()->bytes();
}

void linear(const float* x, std::size_t rows, const linear_weight& w, const float* bias, float* y) {
  if (auto* q = w.quantized()) return quant_linear(x, rows, *q, bias, y);
  linear(x, rows, *w.plain(), bias, y);
}

}  // namespace troupe::kernels
