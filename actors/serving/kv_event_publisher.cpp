#include "actors/serving/kv_event_publisher.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <zmq.hpp>

#include "actors/control/zap.h"
#include "runtime/common/error.h"
#include "runtime/kv/kv_event_codec.h"

namespace troupe::actors {

namespace {

constexpr std::size_t max_queued = 4096;  // batches waiting for the socket thread
constexpr std::int64_t max_subscription_bytes = 1024;  // a SUB's subscribe message (its topic)
constexpr std::int64_t max_request_bytes = 64;         // a replay request's frames: 8 bytes, or empty
// Replays sent at once (each holds at most the socket's high-water mark of messages in ZeroMQ's
// queues); more requests wait, unread, in the socket's bounded receive queue.
constexpr std::size_t max_replays = 8;
// A replay whose client takes longer than this to read the whole buffer is given up.
constexpr std::chrono::seconds replay_deadline{60};

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

// A replay in progress: the client's identity, whether it framed its request with an empty
// delimiter (REQ/DEALER styles), the next sequence number it is owed, and when it must be done.
struct replay_cursor {
  std::string identity;
  bool delimited = false;
  std::int64_t next = 0;
  std::chrono::steady_clock::time_point deadline;
};

struct kv_event_publisher::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay{ctx, zmq::socket_type::router};
  zmq::socket_t zap{ctx, zmq::socket_type::rep};
  bool has_replay = false, curve = false;
  std::set<std::string> authorized;  // binary public keys of the subscribers let in
  std::deque<std::pair<std::int64_t, std::string>> kept;  // (sequence, payload) for replay
  std::deque<replay_cursor> replays;                      // at most max_replays, oldest first
  std::int64_t next_seq = 0;
};

kv_event_publisher::kv_event_publisher(const topology::kv_events_spec& spec) : spec_(spec), z_(std::make_unique<sockets>()) {
  z_->pub.set(zmq::sockopt::linger, 0);
  z_->replay.set(zmq::sockopt::linger, 0);
  // Nothing a client sends may be larger than a request needs: subscriptions on the PUB socket,
  // an 8-byte sequence number (and a delimiter) on the ROUTER. A larger message drops the peer.
  z_->pub.set(zmq::sockopt::maxmsgsize, max_subscription_bytes);
  z_->replay.set(zmq::sockopt::maxmsgsize, max_request_bytes);
  // A replay is sent as fast as the client takes it: a full pipe is an EAGAIN to come back to,
  // not a silent drop (a ROUTER's default past its high-water mark of 1,000 messages).
  z_->replay.set(zmq::sockopt::router_mandatory, 1);
  if (spec.curve()) {  // only the authorized subscribers' keys get in, on both sockets
    const curve_server_keys keys = load_curve_server_keys(spec.secret_key, spec.authorized_keys, "kv_events");
    z_->authorized = keys.authorized;
    bind_zap(z_->zap);
    for (auto* s : {&z_->pub, &z_->replay}) make_curve_server(*s, keys, "troupe-kv-events");
    z_->curve = true;
  }
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
  queued q;
  q.events = b.events.size();
  if (spec_.token_ids) {
    q.payload = kv::encode_kv_event_batch(b);
  } else {  // hashes only: what a router needs, and nothing of anyone's prompt
    kv::kv_event_batch hashes = b;
    for (auto& e : hashes.events) e.token_ids.clear();
    q.payload = kv::encode_kv_event_batch(hashes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= max_queued) {
    dropped_ += q.events;
    return;
  }
  queue_.push_back(std::move(q));
  wake_.notify_one();
}

namespace {

// Sends one reply to a replay client; false when its pipe is full (come back later). Throws
// zmq::error_t when the client is gone.
bool send_reply(zmq::socket_t& s, const replay_cursor& c, std::int64_t seq, const std::string& payload) {
  const std::string seq_bytes = big_endian(seq);
  if (!s.send(zmq::buffer(c.identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
  if (c.delimited) s.send(zmq::message_t(), zmq::send_flags::sndmore);
  s.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
  s.send(zmq::buffer(payload), zmq::send_flags::none);
  return true;
}

}  // namespace

// Sends each replay in progress as much as its client's pipe takes; a replay ends with the
// (-1, empty) marker, and one whose client is gone or stalled past its deadline is dropped.
void kv_event_publisher::advance_replays() {
  sockets& z = *z_;
  const auto now = std::chrono::steady_clock::now();
  for (auto it = z.replays.begin(); it != z.replays.end();) {
    bool done = false;
    try {
      bool room = true;
      auto from = std::lower_bound(z.kept.begin(), z.kept.end(), it->next,
                                   [](const auto& kept, std::int64_t seq) { return kept.first < seq; });
      for (; from != z.kept.end(); ++from) {
        if (!(room = send_reply(z.replay, *it, from->first, from->second))) break;
        it->next = from->first + 1;
      }
      done = room && send_reply(z.replay, *it, -1, std::string());
    } catch (const zmq::error_t&) {
      done = true;  // the client left (EHOSTUNREACH)
    }
    if (!done && now > it->deadline) {
      replays_abandoned_++;
      done = true;
    }
    it = done ? z.replays.erase(it) : std::next(it);
  }
}

// Takes replay requests while there is room for another replay in progress.
void kv_event_publisher::accept_replays() {
  sockets& z = *z_;
  while (z.replays.size() < max_replays) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t m;
      if (!z.replay.recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
    if (frames.empty()) return;
    if (frames.size() < 2 || frames.size() > 3) continue;  // (identity, [empty,] start)
    const std::int64_t start = from_big_endian(frames.back());
    replay_cursor c{frames.front().to_string(), frames.size() == 3, start < 0 ? INT64_MAX : start,
                    std::chrono::steady_clock::now() + replay_deadline};
    z.replays.push_back(std::move(c));
  }
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
    // Waits up to 10 ms for a replay request or a CURVE handshake (or just sleeps that long
    // without either socket), so new batches go out within about 10 ms; 1 ms while a replay is
    // being sent.
    if (!z.has_replay && !z.curve) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(10), [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    zmq::pollitem_t items[] = {{z.zap.handle(), 0, ZMQ_POLLIN, 0}, {z.replay.handle(), 0, ZMQ_POLLIN, 0}};
    const int n = z.has_replay ? 2 : 1;
    zmq::poll(z.curve ? items : items + 1, std::size_t(z.curve ? n : 1), std::chrono::milliseconds(z.replays.empty() ? 10 : 1));
    if (z.curve && (items[0].revents & ZMQ_POLLIN)) answer_zap(z.zap, z.authorized);
    if (!z.has_replay) continue;
    if (items[1].revents & ZMQ_POLLIN) accept_replays();
    advance_replays();
  }
}

}  // namespace troupe::actors
