// GeGLU gate of a Gemma MLP: out = gelu_tanh(gate) * up, with GELU's tanh approximation
// (PyTorch's gelu(approximate="tanh"), Hugging Face's "gelu_pytorch_tanh").
#pragma once
#include <cstddef>

namespace troupe::kernels {

// gate_up: [rows][2 * dim], the gate projection in the first half of each row and the up
// projection in the second (one fused matmul gives both), as swiglu.h. out: [rows][dim].
void geglu(const float* gate_up, std::size_t rows, std::size_t dim, float* out);

// One element: 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
float gelu_tanh(float g);

}  // namespace troupe::kernels
