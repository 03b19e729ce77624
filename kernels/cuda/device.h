// What the CUDA backend can see of the machine. Safe to call without a driver or a GPU.
#pragma once
#include <string>

namespace troupe::kernels::cuda {

// True when this binary was built with nvcc.
bool built();

// Number of usable CUDA devices; 0 when none, when the driver is missing, or when not built.
int device_count();

// One line for `troupe info`: what was built and what was found.
std::string describe();

}  // namespace troupe::kernels::cuda
