// Matrix multiply for decode: a few activation rows (one per running sequence) against a packed
// weight. Bound by reading the weight once, so it splits the weight's panels across threads.
#pragma once
#include <cstddef>

#include "kernels/cpu/packed_weight.h"

namespace troupe::kernels {

// Same contract and the same bits as gemm(); fastest for rows <= 8.
void gemv(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y);

// gemv for small row counts, gemm otherwise.
void linear(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y);

}  // namespace troupe::kernels
