#include "kernels/cuda/nccl_rank.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace troupe::kernels::cuda {

namespace {

std::string nccl_error(const char* what, ncclResult_t r) { return std::string(what) + ": " + ncclGetErrorString(r); }
std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

class rank_impl final : public nccl_rank {
 public:
  rank_impl(int device, int rank, int size, std::chrono::milliseconds timeout)
      : device_(device), rank_(rank), size_(size), timeout_(timeout) {}

  ~rank_impl() override {
    cudaSetDevice(device_);
    if (comm_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!destroyed_) aborted_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    }
    if (stream_) cudaStreamDestroy(stream_);
    if (in_) cudaFree(in_);
    if (out_) cudaFree(out_);
  }

  std::string init(const std::string& id) {
    if (id.size() != sizeof(ncclUniqueId)) return "an NCCL id has " + std::to_string(sizeof(ncclUniqueId)) + " bytes, not " + std::to_string(id.size());
    if (auto e = cudaSetDevice(device_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    if (auto e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) return cuda_error("cudaStreamCreate", e);
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a group whose other ranks never come can be given up
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, uid, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) return nccl_error("ncclCommInitRankConfig", r);
    return settle("joining the group", nullptr);
  }

  std::string all_gather(const float* mine, std::size_t n, float* all) override {
    return run("all_gather", mine, n, all, n * std::size_t(size_), [&] {
      return ncclAllGather(in_, out_, n, ncclFloat32, comm_, stream_);
    });
  }

  std::string all_to_all(const float* send, std::size_t n, float* recv) override {
    const std::size_t block = n / std::size_t(size_);
    return run("all_to_all", send, n, recv, n, [&] {
      if (auto r = ncclGroupStart(); r != ncclSuccess) return r;
      for (int j = 0; j < size_; ++j) {
        if (auto r = ncclSend(static_cast<float*>(in_) + std::size_t(j) * block, block, ncclFloat32, j, comm_, stream_); r != ncclSuccess)
          return r;
        if (auto r = ncclRecv(static_cast<float*>(out_) + std::size_t(j) * block, block, ncclFloat32, j, comm_, stream_); r != ncclSuccess)
          return r;
      }
      return ncclGroupEnd();
    });
  }

  std::string exchange(const std::vector<outgoing>& sends, float* recv, std::size_t n, int from) override {
    std::vector<float> staged;  // every send, one after the other
    for (const auto& o : sends) staged.insert(staged.end(), o.data.begin(), o.data.end());
    return run("send/recv", staged.data(), staged.size(), recv, recv ? n : 0, [&] {
      if (auto r = ncclGroupStart(); r != ncclSuccess) return r;
      std::size_t at = 0;
      for (const auto& o : sends) {
        if (auto r = ncclSend(static_cast<float*>(in_) + at, o.data.size(), ncclFloat32, o.to, comm_, stream_); r != ncclSuccess) return r;
        at += o.data.size();
      }
      if (recv)
        if (auto r = ncclRecv(out_, n, ncclFloat32, from, comm_, stream_); r != ncclSuccess) return r;
      return ncclGroupEnd();
    });
  }

  void abort() override {
    aborted_ = true;
    if (!busy_) kill();  // a call in progress sees the flag and aborts itself
  }

 private:
  // Aborts the communicator once.
  void kill() {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ && !destroyed_) {
      ncclCommAbort(comm_);
      destroyed_ = true;
    }
  }

  // Waits for the communicator's pending work (and, with `op`, the stream): NCCL's errors,
  // abort() and the deadline end the wait with an error and abort the communicator.
  std::string settle(const char* what, const char* op) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      if (aborted_) {
        kill();
        return std::string(what) + ": the group was aborted";
      }
      ncclResult_t async = ncclSuccess;
      if (auto r = ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
      if (async != ncclSuccess && async != ncclInProgress) {
        kill();
        return nccl_error(what, async);
      }
      bool done = async == ncclSuccess;
      if (done && op) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          kill();
          return cuda_error(what, e);
        }
        done = e == cudaSuccess;
      }
      if (done) return "";
      if (std::chrono::steady_clock::now() > deadline) {
        kill();
        return std::string(what) + ": not finished within " + std::to_string(timeout_.count()) + " ms";
      }
      std::this_thread::yield();
    }
  }

  std::string reserve(void*& buf, std::size_t& have, std::size_t bytes) {
    if (bytes <= have) return "";
    if (buf) cudaFree(buf);
    buf = nullptr;
    have = 0;
    if (auto e = cudaMalloc(&buf, bytes); e != cudaSuccess) return cuda_error("cudaMalloc", e);
    have = bytes;
    return "";
  }

  // Stages `in` (n_in values) to the device, enqueues `f`, waits, and copies `n_out` values back to `out`.
  template <class F>
  std::string run(const char* what, const float* in, std::size_t n_in, float* out, std::size_t n_out, F&& f) {
    if (destroyed_) return std::string(what) + ": the group was aborted";
    busy_ = true;
    std::string err = cuda_error_of(cudaSetDevice(device_), "cudaSetDevice");
    if (err.empty()) err = reserve(in_, in_bytes_, std::max<std::size_t>(n_in, 1) * sizeof(float));
    if (err.empty()) err = reserve(out_, out_bytes_, std::max<std::size_t>(n_out, 1) * sizeof(float));
    if (err.empty() && n_in) err = cuda_error_of(cudaMemcpyAsync(in_, in, n_in * sizeof(float), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    if (err.empty()) {
      const ncclResult_t r = f();
      if (r != ncclSuccess && r != ncclInProgress) err = nccl_error(what, r);
    }
    if (err.empty()) err = settle(what, what);
    if (err.empty() && n_out) {
      err = cuda_error_of(cudaMemcpyAsync(out, out_, n_out * sizeof(float), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
      if (err.empty()) err = cuda_error_of(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
    busy_ = false;
    if (aborted_) kill();
    return err;
  }

  static std::string cuda_error_of(cudaError_t e, const char* what) { return e == cudaSuccess ? "" : cuda_error(what, e); }

  int device_, rank_, size_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void *in_ = nullptr, *out_ = nullptr;
  std::size_t in_bytes_ = 0, out_bytes_ = 0;
  std::atomic<bool> aborted_{false}, busy_{false}, destroyed_{false};
  std::mutex mu_;
};

}  // namespace

std::string nccl_unique_id(std::string& err) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    err = "no CUDA device";
    return "";
  }
  ncclUniqueId id;
  if (auto r = ncclGetUniqueId(&id); r != ncclSuccess) {
    err = nccl_error("ncclGetUniqueId", r);
    return "";
  }
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

std::unique_ptr<nccl_rank> nccl_rank::join(int device, int rank, int size, const std::string& id, std::chrono::milliseconds timeout,
                                           std::string& err) {
  auto r = std::make_unique<rank_impl>(device, rank, size, timeout);
  err = r->init(id);
  if (!err.empty()) return nullptr;
  return r;
}

}  // namespace troupe::kernels::cuda
