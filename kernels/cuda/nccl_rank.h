// One rank of an NCCL communicator, for the collectives backend of GPU ranks
// (runtime/collectives/nccl.h): a communicator on a device with its own stream and staging
// buffers. Data comes from and goes back to host memory (the model's tensors are host tensors
// today; a device model will hand device pointers to the same calls).
//
// Every call blocks until its work has finished on the stream, polling NCCL's asynchronous error
// and a deadline meanwhile: a call past its deadline, a peer's failure or abort() aborts the
// communicator (ncclCommAbort), so nothing waits forever and every later call fails. Calls
// return "" or what failed (NCCL's or CUDA's message).
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace troupe::kernels::cuda {

// A fresh ncclUniqueId (its bytes), which rank 0 makes and every rank of the group is given;
// empty with `err` set when there is no NCCL or no device.
std::string nccl_unique_id(std::string& err);

class nccl_rank {
 public:
  // Joins the group `id` as `rank` of `size` on `device`; null with `err` set when it cannot
  // (no device, a bad id, the other ranks not there within `timeout`).
  static std::unique_ptr<nccl_rank> join(int device, int rank, int size, const std::string& id, std::chrono::milliseconds timeout,
                                         std::string& err);
  virtual ~nccl_rank() = default;
  // `all` (size * n) gets rank r's `mine` (n values) at r * n, on every rank.
  virtual std::string all_gather(const float* mine, std::size_t n, float* all) = 0;
  // `send` and `recv` hold size blocks of n / size values: block j goes to rank j.
  virtual std::string all_to_all(const float* send, std::size_t n, float* recv) = 0;
  // Point to point: every send in `sends`, and a receive of n values from `from` into `recv`
  // when `recv` is not null, in one NCCL group, so that ranks sending to each other in a ring
  // do not wait on one another. NCCL completes a send only once its receiver takes part, so the
  // communicator keeps a rank's sends and posts them with its next receive (or before its next
  // collective).
  struct outgoing {
    std::vector<float> data;
    int to = 0;
  };
  virtual std::string exchange(const std::vector<outgoing>& sends, float* recv, std::size_t n, int from) = 0;
  // From any thread: the communicator is aborted (a call waiting now returns its error).
  virtual void abort() = 0;
};

}  // namespace troupe::kernels::cuda
