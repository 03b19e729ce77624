// Collective operations of one parallel group (tensor, expert or pipeline ranks of a replica),
// behind one interface so that the model code does not care where the ranks are: threads of one
// process (shared memory, runtime/collectives/shm.h), processes or hosts (Gloo), GPUs (NCCL).
//
// Contract, for every backend:
// - Every rank of the group calls the same operations in the same order with the same sizes;
//   a rank that calls another operation or size fails the group, naming both.
// - A call returns when this rank's part is done. Reductions add in rank order (0, 1, 2, ...) on
//   every rank, so a result is the same on every rank and run after run.
// - A group is one generation of its ranks. When a rank dies (abort) or a call waits past its
//   deadline, every pending and later call of that generation throws collective_error on every
//   rank: nothing hangs. The supervisor then builds the group again with the next generation.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace troupe::collectives {

class collective_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class reduce_op { sum, max };

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::uint64_t generation() const = 0;

  // In place: every rank ends with the elementwise reduction over all ranks' `data`.
  virtual void all_reduce(std::span<float> data, reduce_op op = reduce_op::sum) = 0;
  // `all` (size() * mine.size()) gets rank r's `mine` at offset r * mine.size(), on every rank.
  virtual void all_gather(std::span<const float> mine, std::span<float> all) = 0;
  // `all` has size() blocks of mine.size(); rank r's `mine` gets block r summed over the ranks.
  virtual void reduce_scatter(std::span<const float> all, std::span<float> mine) = 0;
  // `send` and `recv` have size() equal blocks: block j of this rank's `send` lands in block
  // rank() of rank j's `recv`.
  virtual void all_to_all(std::span<const float> send, std::span<float> recv) = 0;
  // Point to point (pipeline stages): `send` returns once the data is taken; `recv` waits for
  // the next message from `from`, which must have exactly data.size() values.
  virtual void send(std::span<const float> data, int to) = 0;
  virtual void recv(std::span<float> data, int from) = 0;

  // This rank's group has failed (a rank died, said `why`): every pending and later call of
  // this generation, on every rank, throws collective_error with the reason.
  virtual void abort(const std::string& why) = 0;
};

// Every backend's check that all_to_all's `send` splits into `size` equal blocks.
inline void check_blocks(std::size_t values, int size) {
  if (values % std::size_t(size) != 0)
    throw collective_error("all_to_all: " + std::to_string(values) + " values do not split into " + std::to_string(size) +
                           " equal blocks");
}

// `out` gets, element by element, the reduction of `blocks`' size() blocks of out.size() values
// (rank r's block at r * out.size()) in rank order: how the backends that gather every rank's
// values (Gloo, NCCL) keep the contract's bits.
inline void reduce_in_rank_order(std::span<const float> blocks, std::span<float> out, int size, reduce_op op = reduce_op::sum) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    float acc = blocks[i];
    for (int r = 1; r < size; ++r) {
      const float v = blocks[std::size_t(r) * out.size() + i];
      acc = op == reduce_op::sum ? acc + v : (v > acc ? v : acc);
    }
    out[i] = acc;
  }
}

}  // namespace troupe::collectives
