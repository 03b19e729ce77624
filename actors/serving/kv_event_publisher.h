// KV events out of the cluster, for indexers and routers that are not Troupe actors: a ZeroMQ
// PUB socket sends every batch as the multipart message (topic, 8-byte big-endian sequence
// number, payload in runtime/kv/kv_event_codec.h's format), and an optional ROUTER socket
// replays: a client sends (empty frame, 8-byte big-endian sequence number) and gets every kept
// batch from that number on as (empty, sequence, payload), then (empty, -1 as 8 bytes, empty),
// always: the whole buffer, as fast as the client reads it (a replay is sent in steps as the
// client's pipe drains), at most 8 replays at once, each given up after 60 s. Every socket
// refuses messages larger than a request needs (a larger one drops the peer). With keys in the
// spec, both sockets are CURVE servers that let in only the authorized subscribers; with
// token_ids off, stored blocks are published without their tokens.
// The sockets live on a thread of their own; publish() only queues, so an actor never blocks.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/kv/kv_events.h"
#include "topology/topology.h"

namespace troupe::actors {

class kv_event_publisher {
 public:
  // Binds the sockets; throws input_error naming the endpoint if one cannot be bound.
  explicit kv_event_publisher(const topology::kv_events_spec& spec);
  ~kv_event_publisher();
  kv_event_publisher(const kv_event_publisher&) = delete;
  kv_event_publisher& operator=(const kv_event_publisher&) = delete;

  // Queues a batch; if the queue is full (the socket thread fell behind) it is dropped and
  // counted. Thread-safe.
  void publish(const kv::kv_event_batch& b);

  std::uint64_t events_published() const { return published_; }
  std::uint64_t events_dropped() const { return dropped_; }
  std::uint64_t replays_abandoned() const { return replays_abandoned_; }

 private:
  struct queued {
    std::string payload;
    std::size_t events = 0;
  };
  void run();
  void accept_replays();
  void advance_replays();

  topology::kv_events_spec spec_;
  struct sockets;
  std::unique_ptr<sockets> z_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<queued> queue_;
  bool stop_ = false;
  std::atomic<std::uint64_t> published_{0}, dropped_{0}, replays_abandoned_{0};
  std::thread thread_;
};

}  // namespace troupe::actors
