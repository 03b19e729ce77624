// Fault injection for parallel groups: a communicator that passes every call to the rank's real
// one until an armed call, where it throws rank_fault instead of taking part. The rank's actor
// dies of it in the middle of a collective its peers are already waiting in, which is how the
// tests (and `troupe admin`'s fault commands, later) kill a rank mid-collective in one process.
#pragma once
#include <atomic>
#include <memory>

#include "runtime/collectives/communicator.h"

namespace troupe::collectives {

class rank_fault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class fault_injector final : public communicator {
 public:
  explicit fault_injector(std::shared_ptr<communicator> inner) : inner_(std::move(inner)) {}

  // The `calls`-th collective from now (1 = the next) throws rank_fault; 0 disarms.
  void arm(int calls) { left_.store(calls); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::uint64_t generation() const override { return inner_->generation(); }
  void all_reduce(std::span<float> d, reduce_op op) override { check(), inner_->all_reduce(d, op); }
  void all_gather(std::span<const float> m, std::span<float> a) override { check(), inner_->all_gather(m, a); }
  void reduce_scatter(std::span<const float> a, std::span<float> m) override { check(), inner_->reduce_scatter(a, m); }
  void all_to_all(std::span<const float> s, std::span<float> r) override { check(), inner_->all_to_all(s, r); }
  void send(std::span<const float> d, int to) override { check(), inner_->send(d, to); }
  void recv(std::span<float> d, int from) override { check(), inner_->recv(d, from); }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  void check() {
    int left = left_.load();
    if (left > 0 && left_.fetch_sub(1) == 1)
      throw rank_fault("rank " + std::to_string(rank()) + " killed by fault injection in a collective");
  }
  std::shared_ptr<communicator> inner_;
  std::atomic<int> left_{0};
};

}  // namespace troupe::collectives
