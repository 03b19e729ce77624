// Fault injection for parallel groups: a communicator that passes every call to the rank's real
// one until an armed call, where it throws rank_fault instead of taking part. The rank's actor
// dies of it in the middle of a collective its peers are already waiting in, which is how the
// tests (and `troupe admin`'s fault commands, later) kill a rank mid-collective in one process;
// armed to crash, it kills the rank's whole process there instead (a rank on another node).
//
// It is also where a rank's communicator is attached once connected (a Gloo connect runs on the
// rank's own thread): an abort before that is kept and passed on at attach, so a supervisor can
// abort a generation whose ranks are still connecting.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/collectives/communicator.h"

namespace troupe::collectives {

class rank_fault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class fault_injector final : public communicator {
 public:
  fault_injector() = default;
  explicit fault_injector(std::shared_ptr<communicator> inner) : inner_(std::move(inner)) {}

  // The rank's connected communicator (once, before any call; from the rank's thread).
  void attach(std::shared_ptr<communicator> inner) {
    std::lock_guard<std::mutex> lock(mu_);
    inner_ = std::move(inner);
    if (aborted_) inner_->abort(*aborted_);
  }

  // The `calls`-th collective from now (1 = the next) throws rank_fault, or with `whole_process`
  // kills this process (SIGKILL) in it; 0 disarms.
  void arm(int calls, bool whole_process = false) {
    crash_.store(whole_process);
    left_.store(calls);
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::uint64_t generation() const override { return inner_->generation(); }
  void all_reduce(std::span<float> d, reduce_op op) override { check(), inner_->all_reduce(d, op); }
  void all_gather(std::span<const float> m, std::span<float> a) override { check(), inner_->all_gather(m, a); }
  void reduce_scatter(std::span<const float> a, std::span<float> m) override { check(), inner_->reduce_scatter(a, m); }
  void all_to_all(std::span<const float> s, std::span<float> r) override { check(), inner_->all_to_all(s, r); }
  void send(std::span<const float> d, int to) override { check(), inner_->send(d, to); }
  void recv(std::span<float> d, int from) override { check(), inner_->recv(d, from); }
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) aborted_ = why;
    if (inner_) inner_->abort(why);
  }

 private:
  void check() {
    int left = left_.load();
    if (left > 0 && left_.fetch_sub(1) == 1) {
      if (crash_.load()) ::kill(::getpid(), SIGKILL);
      throw rank_fault("rank " + std::to_string(rank()) + " killed by fault injection in a collective");
    }
  }
  std::shared_ptr<communicator> inner_;
  std::atomic<int> left_{0};
  std::atomic<bool> crash_{false};
  std::mutex mu_;
  std::optional<std::string> aborted_;
};

}  // namespace troupe::collectives
