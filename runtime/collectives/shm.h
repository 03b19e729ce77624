// The shared-memory backend of runtime/collectives/communicator.h: the ranks of a group are
// threads of one process and exchange data through each other's buffers (no copies through a
// socket). Each collective is two barriers: every rank publishes its buffers and waits for the
// others, computes its own result from theirs, and waits again so that no rank reuses a buffer
// another is still reading. Each rank reduces over all ranks itself, in rank order: N times the
// arithmetic of a ring, which on the few ranks of one CPU costs less than the synchronisation a
// ring needs, and makes every rank's result bitwise equal.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "runtime/collectives/communicator.h"

namespace troupe::collectives {

struct shm_options {
  int size = 1;
  std::uint64_t generation = 1;
  std::chrono::milliseconds timeout{30000};  // a call waiting longer fails the group
};

// One communicator per rank (index = rank), sharing one group; hand each to its rank's thread.
std::vector<std::unique_ptr<communicator>> make_shm_group(const shm_options& opt);

}  // namespace troupe::collectives
