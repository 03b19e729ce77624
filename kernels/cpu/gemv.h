// Matrix multiply for decode: a few activation rows (one per running sequence) against a packed
// weight. Bound by reading the weight once, so it splits the weight's panels across threads.
#pragma once
#include <cstddef>

#include "kernels/cpu/packed_weight.h"

namespace troupe::kernels {

// Same contract and the same bits as gemm(); fastest for rows <= 16. Up to 24 rows the weight is
// read from memory once, so a sequence's verify rows (speculative decoding) cost about what one
// row does while the step is bound by bandwidth.
void gemv(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y);

// gemv for up to 16 rows, gemm beyond.
void linear(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y);

}  // namespace troupe::kernels
