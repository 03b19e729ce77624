#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string describe() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return std::string("cuda: built, no device (") + cudaGetErrorString(err) + "); backend skipped";
  std::string s = "cuda: built, " + std::to_string(n) + " device(s)";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) s += std::string("; ") + p.name;
  }
  return s;
}

}  // namespace troupe::kernels::cuda
