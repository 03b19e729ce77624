// KV blocks between GPU ranks with NCCL: the sender posts a send of every block, the receiver a
// receive into each of its reserved blocks, both inside one NCCL group on a stream, so the
// blocks move device to device (NVLink or the network) without a copy through the host. The
// primitive of the transfer engine's `nccl` backend; the replicas' caches are in host memory
// today, so nothing in the runtime calls it yet (docs/kv-transfer.md).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace troupe::kernels::cuda {

// Whether this binary has the NCCL path (nvcc and libnccl found at configure time).
bool nccl_built();

// One side of a point-to-point KV move between two ranks of an NCCL communicator. Block i of
// `blocks` (device pointers, block_bytes each) goes to / comes from the peer's block i, in order.
// Returns "" or what failed (NCCL's or CUDA's message). `comm` is an ncclComm_t, `stream` a
// cudaStream_t; the call returns once the stream has finished.
std::string nccl_send_blocks(void* comm, int peer, const std::vector<const void*>& blocks, std::size_t block_bytes, void* stream);
std::string nccl_recv_blocks(void* comm, int peer, const std::vector<void*>& blocks, std::size_t block_bytes, void* stream);

// Moves `src` blocks into `dst` blocks on device `device` through NCCL (a one-rank communicator
// sending to itself: the same send/recv path, exercisable with one GPU). Returns "" or why not
// (no device, no NCCL).
std::string nccl_self_copy(int device, const std::vector<void*>& dst, const std::vector<const void*>& src, std::size_t block_bytes);

// A self-check where a device exists: fills `blocks` device blocks from a seeded pattern, moves
// them into other blocks with nccl_self_copy (reversed order), copies both back and compares
// every byte. Returns "" when they arrived intact, else what went wrong.
std::string nccl_self_check(int device, int blocks, std::size_t block_bytes);

}  // namespace troupe::kernels::cuda
