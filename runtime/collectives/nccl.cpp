#include "runtime/collectives/nccl.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/nccl_rank.h"

namespace troupe::collectives {

namespace {

class nccl_communicator final : public communicator {
 public:
  nccl_communicator(nccl_options opt, std::unique_ptr<kernels::cuda::nccl_rank> r) : opt_(std::move(opt)), rank_(std::move(r)) {}
  int rank() const override { return opt_.rank; }
  int size() const override { return opt_.size; }
  std::uint64_t generation() const override { return opt_.generation; }

  void all_reduce(std::span<float> data, reduce_op op) override {
    std::vector<float> all(data.size() * std::size_t(size()));
    flush("all_reduce");
    check("all_reduce", rank_->all_gather(data.data(), data.size(), all.data()));
    reduce_in_rank_order(all, data, size(), op);
  }

  void all_gather(std::span<const float> mine, std::span<float> all) override {
    check_size("all_gather", all.size(), mine.size() * std::size_t(size()));
    flush("all_gather");
    check("all_gather", rank_->all_gather(mine.data(), mine.size(), all.data()));
  }

  void reduce_scatter(std::span<const float> all, std::span<float> mine) override {
    check_size("reduce_scatter", all.size(), mine.size() * std::size_t(size()));
    std::vector<float> blocks(all.size());  // block r: rank r's block for this rank
    flush("reduce_scatter");
    check("reduce_scatter", rank_->all_to_all(all.data(), all.size(), blocks.data()));
    reduce_in_rank_order(blocks, mine, size());
  }

  void all_to_all(std::span<const float> send, std::span<float> recv) override {
    check_size("all_to_all", recv.size(), send.size());
    check_blocks(send.size(), size());
    flush("all_to_all");
    check("all_to_all", rank_->all_to_all(send.data(), send.size(), recv.data()));
  }

  // A send is kept (copied) and posted with this rank's next receive, or before its next
  // collective: NCCL completes a send only when the receiver takes part (kernels/cuda/nccl_rank.h).
  void send(std::span<const float> data, int to) override {
    check_peer("send", to);
    if (!failed_.empty()) throw collective_error(where("send") + ": the group failed: " + failed_);
    pending_.push_back({std::vector<float>(data.begin(), data.end()), to});
  }

  void recv(std::span<float> data, int from) override {
    check_peer("recv", from);
    auto sends = std::move(pending_);
    pending_.clear();
    check("recv", rank_->exchange(sends, data.data(), data.size(), from));
  }

  // From any thread (the supervisor's): the rank's own calls then fail saying it was aborted.
  void abort(const std::string&) override { rank_->abort(); }

  ~nccl_communicator() override {
    try {
      flush("close");
    } catch (const collective_error&) {  // a peer already gone: nothing left to deliver to
    }
  }

 private:
  std::string where(const char* op) const {
    return std::string(op) + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ", group " + opt_.group +
           " generation " + std::to_string(generation()) + ", NCCL)";
  }
  void check(const char* op, const std::string& err) {
    if (err.empty()) return;
    if (failed_.empty()) failed_ = err;
    throw collective_error(where(op) + ": " + err);
  }
  // Posts the sends kept since the last receive.
  void flush(const char* op) {
    if (pending_.empty()) return;
    auto sends = std::move(pending_);
    pending_.clear();
    check(op, rank_->exchange(sends, nullptr, 0, 0));
  }
  void check_size(const char* op, std::size_t got, std::size_t want) const {
    if (got != want)
      throw collective_error(where(op) + ": the output holds " + std::to_string(got) + " values, " + std::to_string(want) + " needed");
  }
  void check_peer(const char* op, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank()) throw collective_error(where(op) + ": no peer rank " + std::to_string(peer));
  }

  nccl_options opt_;
  std::unique_ptr<kernels::cuda::nccl_rank> rank_;
  std::string failed_;
  std::vector<kernels::cuda::nccl_rank::outgoing> pending_;
};

}  // namespace

std::string nccl_group_id() {
  std::string err;
  std::string id = kernels::cuda::nccl_unique_id(err);
  if (!err.empty()) throw collective_error("NCCL: " + err);
  return id;
}

std::unique_ptr<communicator> connect_nccl(const nccl_options& opt) {
  if (opt.size < 1 || opt.rank < 0 || opt.rank >= opt.size)
    throw collective_error("rank " + std::to_string(opt.rank) + " of a group of " + std::to_string(opt.size) + " does not exist");
  std::string err;
  auto r = kernels::cuda::nccl_rank::join(opt.device, opt.rank, opt.size, opt.id, opt.timeout, err);
  if (!r)
    throw collective_error("group " + opt.group + " generation " + std::to_string(opt.generation) + ", rank " + std::to_string(opt.rank) +
                           ": could not join over NCCL: " + err);
  return std::make_unique<nccl_communicator>(opt, std::move(r));
}

}  // namespace troupe::collectives
