#include "runtime/collectives/gloo.h"

#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace troupe::collectives {

namespace {

class gloo_communicator final : public communicator {
 public:
  gloo_communicator(gloo_options opt, std::shared_ptr<gloo::rendezvous::Context> ctx) : opt_(std::move(opt)), ctx_(std::move(ctx)) {}
  int rank() const override { return opt_.rank; }
  int size() const override { return opt_.size; }
  std::uint64_t generation() const override { return opt_.generation; }

  void all_reduce(std::span<float> data, reduce_op op) override {
    std::vector<float> all(data.size() * std::size_t(size()));
    settle_sends("all_reduce", 0);
    run("all_reduce", [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(data.data(), data.size());
      o.setOutput(all.data(), all.size());
      o.setTimeout(opt_.timeout);
      gloo::allgather(o);
    });
    reduce_in_rank_order(all, data, size(), op);
  }

  void all_gather(std::span<const float> mine, std::span<float> all) override {
    check_size("all_gather", all.size(), mine.size() * std::size_t(size()));
    settle_sends("all_gather", 0);
    run("all_gather", [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(const_cast<float*>(mine.data()), mine.size());
      o.setOutput(all.data(), all.size());
      o.setTimeout(opt_.timeout);
      gloo::allgather(o);
    });
  }

  void reduce_scatter(std::span<const float> all, std::span<float> mine) override {
    check_size("reduce_scatter", all.size(), mine.size() * std::size_t(size()));
    std::vector<float> blocks(all.size());  // block r: rank r's block for this rank
    exchange("reduce_scatter", all, blocks);
    reduce_in_rank_order(blocks, mine, size());
  }

  void all_to_all(std::span<const float> send, std::span<float> recv) override {
    check_size("all_to_all", recv.size(), send.size());
    check_blocks(send.size(), size());
    exchange("all_to_all", send, recv);
  }

  // Gloo completes a send only once the peer has posted its receive, so a send is posted from a
  // copy of the data and returns; sends still in flight are waited for before the next
  // collective, or when too many are.
  void send(std::span<const float> data, int to) override {
    check_peer("send", to);
    run("send", [&] {
      auto copy = std::make_unique<std::vector<float>>(data.begin(), data.end());
      auto buf = ctx_->createUnboundBuffer(copy->data(), copy->size() * sizeof(float));
      buf->send(to, slot(rank_of_pair(opt_.rank, to)));
      in_flight_.push_back({std::move(copy), std::move(buf), to});
    });
    if (in_flight_.size() > 64) settle_sends("send", 32);
  }

  void recv(std::span<float> data, int from) override {
    check_peer("recv", from);
    run("recv", [&] {
      auto buf = ctx_->createUnboundBuffer(data.data(), data.size_bytes());
      buf->recv(from, slot(rank_of_pair(from, opt_.rank)));
      if (!buf->waitRecv(opt_.timeout)) throw collective_error("recv from rank " + std::to_string(from) + " waited past its deadline");
    });
  }

  ~gloo_communicator() override {
    try {
      settle_sends("close", 0);
    } catch (const std::exception&) {  // a peer already gone: nothing left to deliver to
    }
  }

  // From any thread (the supervisor's), while this rank's thread may be inside a call.
  void abort(const std::string& why) override {
    if (!fail(why)) return;  // failed already: its connections are down
    // Gloo's closeConnections closes the sockets but does not wake a call already waiting on
    // them: that call would wait for its deadline, or forever once the fd is no longer polled
    // (a dead peer's end of file is then never read). A buffer wait that times out, on the other
    // hand, fails every pending operation on every pair of the context and closes its sockets,
    // so this rank's waiting call throws now and the peers' calls fail at their end of file.
    auto probe = ctx_->createUnboundBuffer(nullptr, 0);
    try {
      probe->waitRecv(nullptr, std::chrono::milliseconds(0));
    } catch (const std::exception&) {  // the timeout it was asked for
    }
    ctx_->closeConnections();
  }

 private:
  std::string where(const char* op) const {
    return std::string(op) + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ", group " + opt_.group +
           " generation " + std::to_string(generation()) + ")";
  }

  // Waits until at most `keep` sends are in flight.
  void settle_sends(const char* op, std::size_t keep) {
    run(op, [&] {
      while (in_flight_.size() > keep) {
        auto& s = in_flight_.front();
        if (!s.buf->waitSend(opt_.timeout))
          throw collective_error("a send to rank " + std::to_string(s.to) + " was not received within the deadline");
        in_flight_.erase(in_flight_.begin());
      }
    });
  }

  // Runs a Gloo call; any failure fails this generation for good. A call woken by an abort
  // names the abort's reason, not the closed connection it saw.
  template <class F>
  void run(const char* op, F&& f) {
    if (broken_.load()) throw collective_error(where(op) + ": the group failed: " + reason());
    try {
      f();
    } catch (const std::exception& e) {
      fail(e.what());
      throw collective_error(where(op) + ": " + reason());
    }
  }

  // Records the generation's first failure; false if it had failed already.
  bool fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(failed_mu_);
    if (broken_.load()) return false;
    failed_ = why;
    broken_.store(true);
    return true;
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(failed_mu_);
    return failed_;
  }

  void exchange(const char* op, std::span<const float> send, std::span<float> recv) {
    settle_sends(op, 0);
    run(op, [&] {
      gloo::AlltoallOptions o(ctx_);
      o.setInput(const_cast<float*>(send.data()), send.size());
      o.setOutput(recv.data(), recv.size());
      o.setTimeout(opt_.timeout);
      gloo::alltoall(o);
    });
  }

  void check_size(const char* op, std::size_t got, std::size_t want) const {
    if (got != want)
      throw collective_error(where(op) + ": the output holds " + std::to_string(got) + " values, " + std::to_string(want) + " needed");
  }

  void check_peer(const char* op, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank()) throw collective_error(where(op) + ": no peer rank " + std::to_string(peer));
  }

  // Point-to-point messages between two ranks go in order on their own slot.
  std::uint64_t rank_of_pair(int from, int to) const { return std::uint64_t(from) * std::uint64_t(size()) + std::uint64_t(to); }
  std::uint64_t slot(std::uint64_t pair) { return (pair << 32) | sequence_[pair]++; }

  gloo_options opt_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::atomic<bool> broken_{false};
  std::mutex failed_mu_;  // failed_ is written by the first failure, on either thread
  std::string failed_;
  std::map<std::uint64_t, std::uint32_t> sequence_;
  struct pending_send {
    std::unique_ptr<std::vector<float>> data;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    int to = 0;
  };
  std::vector<pending_send> in_flight_;
};

// Gloo's store interface over a rendezvous service.
class service_store final : public gloo::rendezvous::Store {
 public:
  service_store(rendezvous r, std::chrono::milliseconds timeout) : r_(std::move(r)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { r_.set(key, std::string(data.begin(), data.end())); }
  std::vector<char> get(const std::string& key) override {
    const std::string v = r_.get(key, timeout_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) r_.get(k, timeout);
  }

 private:
  rendezvous r_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<communicator> connect_gloo(const gloo_options& opt) {
  if (opt.size < 1 || opt.rank < 0 || opt.rank >= opt.size)
    throw collective_error("rank " + std::to_string(opt.rank) + " of a group of " + std::to_string(opt.size) + " does not exist");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = opt.host;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    std::unique_ptr<gloo::rendezvous::Store> base;
    if (opt.store.get) base = std::make_unique<service_store>(opt.store, opt.timeout);
    else base = std::make_unique<gloo::rendezvous::FileStore>(opt.store_dir);
    gloo::rendezvous::PrefixStore store(opt.group + "/" + std::to_string(opt.generation), *base);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(opt.rank, opt.size);
    ctx->setTimeout(opt.timeout);
    ctx->connectFullMesh(store, dev);
    return std::make_unique<gloo_communicator>(opt, std::move(ctx));
  } catch (const std::exception& e) {
    throw collective_error("group " + opt.group + " generation " + std::to_string(opt.generation) + ", rank " + std::to_string(opt.rank) +
                           ": could not connect: " + e.what());
  }
}

}  // namespace troupe::collectives
