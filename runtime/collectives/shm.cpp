#include "runtime/collectives/shm.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

namespace troupe::collectives {

namespace {

// What one rank put up for the collective in progress.
struct posted {
  const char* op = "";
  std::size_t count = 0;  // this rank's element count for the op (its `data`, `mine` or one block)
  const float* in = nullptr;
};

struct group_state {
  shm_options opt;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<posted> post;
  int arrived = 0;
  std::uint64_t phase = 0;  // barriers passed
  std::optional<std::string> failed;
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail;  // (from, to) -> messages
};

class shm_communicator final : public communicator {
 public:
  shm_communicator(std::shared_ptr<group_state> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->opt.size; }
  std::uint64_t generation() const override { return g_->opt.generation; }

  void all_reduce(std::span<float> data, reduce_op op) override {
    const char* name = op == reduce_op::sum ? "all_reduce(sum)" : "all_reduce(max)";
    std::vector<float> out(data.size());
    collective(name, data.size(), data.data(), [&](const std::vector<posted>& p) {
      for (std::size_t i = 0; i < out.size(); ++i) {
        float acc = p[0].in[i];
        for (std::size_t r = 1; r < p.size(); ++r) acc = op == reduce_op::sum ? acc + p[r].in[i] : std::max(acc, p[r].in[i]);
        out[i] = acc;
      }
    });
    std::copy(out.begin(), out.end(), data.begin());  // after the last barrier: nobody reads `data` any more
  }

  void all_gather(std::span<const float> mine, std::span<float> all) override {
    check_size("all_gather", all.size(), mine.size() * std::size_t(size()));
    collective("all_gather", mine.size(), mine.data(), [&](const std::vector<posted>& p) {
      for (std::size_t r = 0; r < p.size(); ++r) std::copy(p[r].in, p[r].in + mine.size(), all.data() + r * mine.size());
    });
  }

  void reduce_scatter(std::span<const float> all, std::span<float> mine) override {
    check_size("reduce_scatter", all.size(), mine.size() * std::size_t(size()));
    const std::size_t n = mine.size(), at = std::size_t(rank_) * n;
    collective("reduce_scatter", n, all.data(), [&](const std::vector<posted>& p) {
      for (std::size_t i = 0; i < n; ++i) {
        float acc = p[0].in[at + i];
        for (std::size_t r = 1; r < p.size(); ++r) acc += p[r].in[at + i];
        mine[i] = acc;
      }
    });
  }

  void all_to_all(std::span<const float> send, std::span<float> recv) override {
    check_size("all_to_all", recv.size(), send.size());
    check_blocks(send.size(), size());
    const std::size_t n = send.size() / std::size_t(size()), at = std::size_t(rank_) * n;
    collective("all_to_all", n, send.data(), [&](const std::vector<posted>& p) {
      for (std::size_t r = 0; r < p.size(); ++r) std::copy(p[r].in + at, p[r].in + at + n, recv.data() + r * n);
    });
  }

  void send(std::span<const float> data, int to) override {
    check_peer("send", to);
    std::lock_guard lock(g_->mu);
    throw_if_failed("send");
    g_->mail[{rank_, to}].emplace_back(data.begin(), data.end());
    g_->cv.notify_all();
  }

  void recv(std::span<float> data, int from) override {
    check_peer("recv", from);
    std::unique_lock lock(g_->mu);
    auto& box = g_->mail[{from, rank_}];
    if (!g_->cv.wait_until(lock, deadline(), [&] { return !box.empty() || g_->failed; }))
      fail(lock, "recv on rank " + std::to_string(rank_) + " waited past its deadline for rank " + std::to_string(from));
    throw_if_failed("recv");
    std::vector<float> m = std::move(box.front());
    box.pop_front();
    if (m.size() != data.size())
      fail(lock, "recv on rank " + std::to_string(rank_) + " expected " + std::to_string(data.size()) + " values from rank " +
                     std::to_string(from) + ", which sent " + std::to_string(m.size()));
    std::copy(m.begin(), m.end(), data.begin());
  }

  void abort(const std::string& why) override {
    std::unique_lock lock(g_->mu);
    if (!g_->failed) g_->failed = why;
    g_->cv.notify_all();
  }

 private:
  std::chrono::steady_clock::time_point deadline() const { return std::chrono::steady_clock::now() + g_->opt.timeout; }

  std::string where(const char* op) const {
    return std::string(op) + " (rank " + std::to_string(rank_) + " of " + std::to_string(size()) + ", group generation " +
           std::to_string(generation()) + ")";
  }

  void throw_if_failed(const char* op) const {
    if (g_->failed) throw collective_error(where(op) + ": the group failed: " + *g_->failed);
  }

  [[noreturn]] void fail(std::unique_lock<std::mutex>&, const std::string& why) {
    if (!g_->failed) g_->failed = why;
    g_->cv.notify_all();
    throw collective_error(std::string("group generation ") + std::to_string(generation()) + ": " + *g_->failed);
  }

  void check_size(const char* op, std::size_t got, std::size_t want) const {
    if (got != want)
      throw collective_error(where(op) + ": the output holds " + std::to_string(got) + " values, " + std::to_string(want) + " needed");
  }

  void check_peer(const char* op, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw collective_error(where(op) + ": no peer rank " + std::to_string(peer));
  }

  // Waits until every rank reached this point of the same phase (or the group failed).
  void barrier(std::unique_lock<std::mutex>& lock, const char* op) {
    throw_if_failed(op);
    const std::uint64_t mine = g_->phase;
    if (++g_->arrived == size()) {
      g_->arrived = 0;
      ++g_->phase;
      g_->cv.notify_all();
      return;
    }
    if (!g_->cv.wait_until(lock, deadline(), [&] { return g_->phase != mine || g_->failed; })) {
      std::string missing;
      for (int r = 0; r < size(); ++r)
        if (g_->post[std::size_t(r)].in == nullptr) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail(lock, where(op) + " waited past its deadline" + (missing.empty() ? "" : " for rank(s) " + missing));
    }
    throw_if_failed(op);
  }

  // Publish, wait for all, `compute` from everyone's posts, wait for all again.
  template <class F>
  void collective(const char* op, std::size_t count, const float* in, F&& compute) {
    std::unique_lock lock(g_->mu);
    g_->post[std::size_t(rank_)] = {op, count, in};
    barrier(lock, op);
    const std::vector<posted> p = g_->post;
    for (int r = 0; r < size(); ++r)
      if (std::string(p[std::size_t(r)].op) != op || p[std::size_t(r)].count != count)
        fail(lock, where(op) + " with " + std::to_string(count) + " values met rank " + std::to_string(r) + "'s " +
                       p[std::size_t(r)].op + " with " + std::to_string(p[std::size_t(r)].count));
    lock.unlock();
    compute(p);
    lock.lock();
    barrier(lock, op);
    g_->post[std::size_t(rank_)] = {};
  }

  std::shared_ptr<group_state> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<communicator>> make_shm_group(const shm_options& opt) {
  if (opt.size < 1) throw collective_error("a group needs at least one rank, got " + std::to_string(opt.size));
  auto g = std::make_shared<group_state>();
  g->opt = opt;
  g->post.resize(std::size_t(opt.size));
  std::vector<std::unique_ptr<communicator>> out;
  for (int r = 0; r < opt.size; ++r) out.push_back(std::make_unique<shm_communicator>(g, r));
  return out;
}

}  // namespace troupe::collectives
