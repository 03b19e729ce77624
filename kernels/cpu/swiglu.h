// SwiGLU gate of a Llama MLP: out = silu(gate) * up.
#pragma once
#include <cstddef>

namespace troupe::kernels {

// gate_up: [rows][2 * dim] with the gate projection in the first half of each row and the up
// projection in the second (one fused matmul produces both). out: [rows][dim].
void swiglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out);

}  // namespace troupe::kernels
