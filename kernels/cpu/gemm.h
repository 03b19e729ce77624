// Matrix multiply for prefill: many activation rows against a packed weight.
#pragma once
#include <cstddef>

#include "kernels/cpu/packed_weight.h"

namespace troupe::kernels {

// y[t][c] = sum_k x[t][k] * W[c][k] (+ bias[c]) for t < rows, c < w.n.
// x: [rows][w.k], y: [rows][w.n], bias: [w.n] or null. Runs on all kernel threads.
// Each output is the same bits whatever `rows` is, and equals gemv's.
void gemm(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y);

}  // namespace troupe::kernels
