#include "runtime/kv/connector.h"

namespace troupe::kv::connector {

bool incoming::trim(int blocks, int tokens) {
  if (from_.empty() || blocks <= 0) return false;
  from_.blocks.erase(from_.blocks.begin(), from_.blocks.begin() + blocks);
  from_.positions -= tokens;
  skip_ = blocks;
  if (from_.positions > 0) return false;
  from_ = {};
  skip_ = 0;
  return true;
}

void incoming::start(std::uint64_t epoch) {
  pulling_ = true;
  epoch_ = epoch;
}

bool incoming::abort_when_pulled() {
  if (pulling_) abort_ = true;
  return pulling_;
}

bool incoming::lose() {
  if (pulling_) lost_ = true;
  return pulling_;
}

after_pull incoming::end(std::uint64_t epoch, std::string& error, failure_policy policy) {
  if (!pulling_ || epoch != epoch_) return after_pull::stale;
  pulling_ = false;
  skip_ = 0;
  from_ = {};
  const bool lost = std::exchange(lost_, false);
  if (lost && error.empty()) error = "the replica's KV was lost while it arrived";
  if (std::exchange(abort_, false)) return after_pull::abort;
  if (error.empty()) return after_pull::compute_on;
  // A pull that failed because this replica lost its KV says nothing about the sender: the
  // request is recomputed here like every other one the loss hit.
  return policy == failure_policy::retry && !lost ? after_pull::retry_elsewhere : after_pull::recompute_here;
}

transfer::kv_handle incoming::pass_on() {
  if (pulling_) return {};
  skip_ = 0;
  return std::exchange(from_, {});
}

}  // namespace troupe::kv::connector
