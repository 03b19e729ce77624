// The NCCL backend of runtime/collectives/communicator.h: ranks on GPUs, one device each, joined
// by an NCCL communicator (kernels/cuda/nccl_rank.h; built with nvcc and /usr/local/cuda's
// NCCL, usable where a device exists). Reductions are an NCCL all-gather followed by a sum in
// rank order on every rank, as in the Gloo backend, so the bits are those of every other backend
// (NCCL's own ring reduction adds in another order). A call that fails or passes its deadline,
// or an abort, aborts the NCCL communicator: every later call of the generation throws
// collective_error.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "runtime/collectives/communicator.h"

namespace troupe::collectives {

struct nccl_options {
  int rank = 0, size = 1;
  std::uint64_t generation = 1;
  int device = 0;        // this rank's CUDA device
  std::string id;        // the group's NCCL unique id (nccl_group_id on one rank, given to all)
  std::string group;     // names the group in messages
  std::chrono::milliseconds timeout{30000};
};

// A fresh id for a group (throws collective_error naming why not: no NCCL, no device).
std::string nccl_group_id();

// Joins the group (blocks until every rank has, or throws collective_error after the timeout).
std::unique_ptr<communicator> connect_nccl(const nccl_options& opt);

}  // namespace troupe::collectives
