// Without nvcc or NCCL: no GPU ranks; every call says why.
#include "kernels/cuda/nccl_rank.h"

namespace troupe::kernels::cuda {

std::string nccl_unique_id(std::string& err) {
  err = "this build has no NCCL (nvcc or libnccl was not found at configure time)";
  return "";
}

std::unique_ptr<nccl_rank> nccl_rank::join(int, int, int, const std::string&, std::chrono::milliseconds, std::string& err) {
  err = "this build has no NCCL (nvcc or libnccl was not found at configure time)";
  return nullptr;
}

}  // namespace troupe::kernels::cuda
