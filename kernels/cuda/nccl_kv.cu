#include "kernels/cuda/nccl_kv.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>

namespace troupe::kernels::cuda {

namespace {

std::string nccl_error(const char* what, ncclResult_t r) { return std::string(what) + ": " + ncclGetErrorString(r); }

// Posts one send or receive per block inside an open group.
template <class Ptr>
std::string post(ncclComm_t comm, int peer, const std::vector<Ptr>& blocks, std::size_t bytes, cudaStream_t s, bool send) {
  for (auto p : blocks) {
    const ncclResult_t r = send ? ncclSend(p, bytes, ncclUint8, peer, comm, s)
                                : ncclRecv(const_cast<void*>(static_cast<const void*>(p)), bytes, ncclUint8, peer, comm, s);
    if (r != ncclSuccess) return nccl_error(send ? "ncclSend" : "ncclRecv", r);
  }
  return "";
}

std::string finish(ncclResult_t end, cudaStream_t s) {
  if (end != ncclSuccess) return nccl_error("ncclGroupEnd", end);
  const cudaError_t e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? "" : std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e);
}

}  // namespace

bool nccl_built() { return true; }

std::string nccl_send_blocks(void* comm, int peer, const std::vector<const void*>& blocks, std::size_t block_bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (auto r = ncclGroupStart(); r != ncclSuccess) return nccl_error("ncclGroupStart", r);
  std::string err = post(static_cast<ncclComm_t>(comm), peer, blocks, block_bytes, s, true);
  const ncclResult_t end = ncclGroupEnd();
  return err.empty() ? finish(end, s) : err;
}

std::string nccl_recv_blocks(void* comm, int peer, const std::vector<void*>& blocks, std::size_t block_bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (auto r = ncclGroupStart(); r != ncclSuccess) return nccl_error("ncclGroupStart", r);
  std::string err = post(static_cast<ncclComm_t>(comm), peer, blocks, block_bytes, s, false);
  const ncclResult_t end = ncclGroupEnd();
  return err.empty() ? finish(end, s) : err;
}

std::string nccl_self_copy(int device, const std::vector<void*>& dst, const std::vector<const void*>& src, std::size_t block_bytes) {
  if (dst.size() != src.size()) return "nccl_self_copy: as many destination blocks as source blocks";
  if (cudaSetDevice(device) != cudaSuccess) return "no CUDA device " + std::to_string(device);
  ncclComm_t comm;
  int devs[1] = {device};
  if (auto r = ncclCommInitAll(&comm, 1, devs); r != ncclSuccess) return nccl_error("ncclCommInitAll", r);
  cudaStream_t s;
  cudaStreamCreate(&s);
  // Sends and receives to self must be in one group, or each would wait for the other.
  std::string err;
  if (auto r = ncclGroupStart(); r != ncclSuccess) err = nccl_error("ncclGroupStart", r);
  if (err.empty()) err = post(comm, 0, src, block_bytes, s, true);
  if (err.empty()) err = post(comm, 0, dst, block_bytes, s, false);
  const ncclResult_t end = ncclGroupEnd();
  if (err.empty()) err = finish(end, s);
  cudaStreamDestroy(s);
  ncclCommDestroy(comm);
  return err;
}

std::string nccl_self_check(int device, int blocks, std::size_t block_bytes) {
  if (cudaSetDevice(device) != cudaSuccess) return "no CUDA device " + std::to_string(device);
  const std::size_t total = std::size_t(blocks) * block_bytes;
  std::vector<unsigned char> host(total), back(total);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  unsigned char *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, total) != cudaSuccess || cudaMalloc(&dst, total) != cudaSuccess) return "cudaMalloc failed";
  cudaMemcpy(src, host.data(), total, cudaMemcpyHostToDevice);
  cudaMemset(dst, 0, total);
  std::vector<const void*> from;
  std::vector<void*> to;
  for (int i = 0; i < blocks; ++i) {
    from.push_back(src + std::size_t(i) * block_bytes);
    to.push_back(dst + std::size_t(blocks - 1 - i) * block_bytes);
  }
  std::string err = nccl_self_copy(device, to, from, block_bytes);
  if (err.empty()) {
    cudaMemcpy(back.data(), dst, total, cudaMemcpyDeviceToHost);
    for (int i = 0; i < blocks && err.empty(); ++i)
      if (std::memcmp(back.data() + std::size_t(blocks - 1 - i) * block_bytes, host.data() + std::size_t(i) * block_bytes, block_bytes) != 0)
        err = "block " + std::to_string(i) + " arrived changed";
  }
  cudaFree(src);
  cudaFree(dst);
  return err;
}

}  // namespace troupe::kernels::cuda
