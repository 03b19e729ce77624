#include "kernels/cuda/device.h"

namespace troupe::kernels::cuda {

bool built() { return false; }
int device_count() { return 0; }
std::string describe() { return "cuda: not built (nvcc was not found at configure time)"; }

}  // namespace troupe::kernels::cuda
