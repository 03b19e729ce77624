// A linear layer's weight in whichever form it was stored: plain (f32/f16/bf16 panels) or
// quantized blocks. The model holds these and calls linear(); only the kernels look inside.
#pragma once
#include <cstddef>
#include <variant>

#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quant_weight.h"

namespace troupe::kernels {

class linear_weight {
 public:
  linear_weight() = default;
  linear_weight(packed_weight w) : n(w.n), k(w.k), w_(std::move(w)) {}
  linear_weight(quant_weight w) : n(w.n), k(w.k), w_(std::move(w)) {}

  std::size_t n = 0, k = 0;  // out features, in features
  std::size_t bytes() const;  // what one matmul reads
  const packed_weight* plain() const { return std::get_if<packed_weight>(&w_); }
  const quant_weight* quantized() const { return std::get_if<quant_weight>(&w_); }

 private:
  std::variant<packed_weight, quant_weight> w_;
};

// y = x W^T (+ bias), the plain or the int8 kernels as the weight's form says.
void linear(const float* x, std::size_t rows, const linear_weight& w, const float* bias, float* y);

}  // namespace troupe::kernels
