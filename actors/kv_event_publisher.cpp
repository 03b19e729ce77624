#include "actors/kv_event_publisher.h"

#include <zmq.hpp>

#include "runtime/common/error.h"
#include "runtime/kv/kv_event_codec.h"

namespace troupe::actors {

namespace {

constexpr std::size_t max_queued = 4096;  // batches waiting for the socket thread

std::string big_endian(std::int64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v = std::int64_t(std::uint64_t(v) >> 8)) s[std::size_t(i)] = char(v & 0xff);
  return s;
}

std::int64_t from_big_endian(const zmq::message_t& m) {
  if (m.size() != 8) return -1;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const std::uint8_t*>(m.data())[i];
  return std::int64_t(v);
}

}  // namespace

struct kv_event_publisher::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay{ctx, zmq::socket_type::router};
  bool has_replay = false;
  std::deque<std::pair<std::int64_t, std::string>> kept;  // (sequence, payload) for replay
  std::int64_t next_seq = 0;
};

kv_event_publisher::kv_event_publisher(const topology::kv_events_spec& spec) : spec_(spec), z_(std::make_unique<sockets>()) {
  z_->pub.set(zmq::sockopt::linger, 0);
  z_->replay.set(zmq::sockopt::linger, 0);
  try {
    z_->pub.bind(spec.endpoint);
  } catch (const zmq::error_t& e) {
    throw input_error("kv_events.endpoint: cannot bind " + spec.endpoint + ": " + e.what());
  }
  if (!spec.replay_endpoint.empty()) {
    try {
      z_->replay.bind(spec.replay_endpoint);
    } catch (const zmq::error_t& e) {
      throw input_error("kv_events.replay_endpoint: cannot bind " + spec.replay_endpoint + ": " + e.what());
    }
    z_->has_replay = true;
  }
  thread_ = std::thread([this] { run(); });
}

kv_event_publisher::~kv_event_publisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void kv_event_publisher::publish(const kv::kv_event_batch& b) {
  queued q{kv::encode_kv_event_batch(b), b.events.size()};
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= max_queued) {
    dropped_ += q.events;
    return;
  }
  queue_.push_back(std::move(q));
  wake_.notify_one();
}

void kv_event_publisher::run() {
  sockets& z = *z_;
  for (;;) {
    std::deque<queued> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      batch.swap(queue_);
    }
    for (auto& q : batch) {
      const std::int64_t seq = z.next_seq++;
      const std::string seq_bytes = big_endian(seq);
      z.pub.send(zmq::buffer(spec_.topic), zmq::send_flags::sndmore);
      z.pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
      z.pub.send(zmq::buffer(q.payload), zmq::send_flags::none);
      published_ += q.events;
      if (z.has_replay) {
        z.kept.emplace_back(seq, std::move(q.payload));
        while (z.kept.size() > std::size_t(spec_.buffer)) z.kept.pop_front();
      }
    }
    // Waits up to 10 ms for a replay request (or just sleeps that long without a replay
    // socket), so new batches go out within about 10 ms.
    if (!z.has_replay) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(10), [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    zmq::pollitem_t items[] = {{z.replay.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(10));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t m;
      if (!z.replay.recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
    if (frames.size() < 2 || frames.size() > 3) continue;  // (identity, [empty,] start)
    const bool delimited = frames.size() == 3;
    const std::int64_t start = from_big_endian(frames.back());
    auto reply = [&](const std::string& seq, const std::string& payload) {
      z.replay.send(zmq::buffer(frames.front().data(), frames.front().size()), zmq::send_flags::sndmore);
      if (delimited) z.replay.send(zmq::message_t(), zmq::send_flags::sndmore);
      z.replay.send(zmq::buffer(seq), zmq::send_flags::sndmore);
      z.replay.send(zmq::buffer(payload), zmq::send_flags::none);
    };
    if (start >= 0)
      for (const auto& [seq, payload] : z.kept)
        if (seq >= start) reply(big_endian(seq), payload);
    reply(big_endian(-1), std::string());
  }
}

}  // namespace troupe::actors
