// The KV-event replay socket: a replay sends the whole buffer and always ends with the (-1)
// marker (it stopped at about 1,000 batches, a ROUTER's high-water mark, with no marker), and a
// message larger than a request needs is refused (four 1 GiB "requests" took a head to 3.8 GB).
#define BOOST_TEST_MODULE kv_event_replay
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <fstream>
#include <thread>
#include <zmq.hpp>

#include "actors/control/admin_endpoint.h"
#include "actors/serving/kv_event_publisher.h"
#include "tests/support/http_client.h"

using namespace troupe;

namespace {

std::int64_t seq_of(const zmq::message_t& m) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const std::uint8_t*>(m.data())[i];
  return std::int64_t(v);
}

std::string start_frame(std::int64_t start) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, start >>= 8) s[std::size_t(i)] = char(start & 0xff);
  return s;
}

struct publisher_fixture {
  topology::kv_events_spec spec;
  std::unique_ptr<actors::kv_event_publisher> pub;
  explicit publisher_fixture(int batches, int buffer) {
    spec.endpoint = "tcp://127.0.0.1:" + std::to_string(test::free_port());
    spec.replay_endpoint = "tcp://127.0.0.1:" + std::to_string(test::free_port());
    spec.topic = "kv";
    spec.buffer = buffer;
    pub = std::make_unique<actors::kv_event_publisher>(spec);
    // In rounds of 1,000, under the publisher's queue bound: the socket thread keeps what it has
    // sent, so each round waits (to a deadline) until it has sent them all.
    for (int i = 0; i < batches; ++i) {
      kv::kv_event_batch b;
      b.seq = std::uint64_t(i + 1);
      b.events.push_back({kv::kv_event_kind::removed, {kv::block_hash(i)}});
      pub->publish(b);
      if ((i + 1) % 1000 != 0 && i + 1 != batches) continue;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (pub->events_published() < std::uint64_t(i + 1) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a deadline, not synchronising
    }
    BOOST_REQUIRE(pub->events_published() == std::uint64_t(batches));
    BOOST_REQUIRE(pub->events_dropped() == 0u);
  }
};

// Sends (empty, start) and collects the sequence numbers until the -1 marker; empty if no
// answer came within `wait`.
std::vector<std::int64_t> replay(zmq::socket_t& d, const std::string& start, std::chrono::milliseconds wait) {
  d.set(zmq::sockopt::rcvtimeo, int(wait.count()));
  d.send(zmq::message_t(), zmq::send_flags::sndmore);
  d.send(zmq::buffer(start), zmq::send_flags::none);
  std::vector<std::int64_t> seqs;
  for (;;) {
    zmq::message_t empty, seq, payload;
    if (!d.recv(empty)) return seqs;
    (void)d.recv(seq);
    (void)d.recv(payload);
    seqs.push_back(seq_of(seq));
    if (seqs.back() == -1) return seqs;
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_replay_sends_the_whole_buffer_then_the_end_marker) {
  publisher_fixture f(5000, 4000);  // the first 1,000 batches have left the buffer
  zmq::context_t ctx;
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  d.connect(f.spec.replay_endpoint);
  const auto seqs = replay(d, start_frame(0), std::chrono::seconds(30));
  BOOST_TEST_REQUIRE(seqs.size() == 4001u);  // 4,000 batches and the marker
  for (std::size_t i = 0; i < 4000; ++i) BOOST_TEST_REQUIRE(seqs[i] == std::int64_t(1000 + i));
  BOOST_TEST(seqs.back() == -1);
  // From the middle, and past the end: the rest, then the marker alone.
  BOOST_TEST(replay(d, start_frame(4990), std::chrono::seconds(30)).size() == 11u);
  BOOST_TEST(replay(d, start_frame(9999), std::chrono::seconds(30)) == std::vector<std::int64_t>{-1});
}

BOOST_AUTO_TEST_CASE(a_message_larger_than_a_request_gets_no_answer_and_the_socket_serves_on) {
  publisher_fixture f(10, 100);
  zmq::context_t ctx;
  zmq::socket_t big(ctx, zmq::socket_type::dealer);
  big.set(zmq::sockopt::linger, 0);
  big.connect(f.spec.replay_endpoint);
  // Without a limit this would be read, answered with the marker, and a 1 GiB one held whole.
  BOOST_TEST(replay(big, std::string(1 << 20, 'x'), std::chrono::seconds(2)).empty());
  zmq::socket_t d(ctx, zmq::socket_type::dealer);
  d.set(zmq::sockopt::linger, 0);
  d.connect(f.spec.replay_endpoint);
  BOOST_TEST(replay(d, start_frame(0), std::chrono::seconds(30)).size() == 11u);
}

// Any local process could subscribe and read every tenant's prompt tokens. With keys, only an
// authorized subscriber gets the events; with token_ids off, they carry hashes alone.
BOOST_AUTO_TEST_CASE(with_keys_only_an_authorized_subscriber_gets_events_and_hashes_only_hide_the_tokens) {
  const auto server = actors::curve_keypair(), client = actors::curve_keypair(), stranger = actors::curve_keypair();
  const std::string secret_file = std::string(TROUPE_BINARY_DIR) + "/kv-events-test.key";
  std::ofstream(secret_file) << server.secret_key << "\n";
  for (const bool token_ids : {true, false}) {
    topology::kv_events_spec spec;
    spec.endpoint = "tcp://127.0.0.1:" + std::to_string(test::free_port());
    spec.topic = "kv";
    spec.secret_key = secret_file;
    spec.authorized_keys = {client.public_key};
    spec.token_ids = token_ids;
    actors::kv_event_publisher pub(spec);
    zmq::context_t ctx;
    auto subscriber = [&](const actors::curve_pair& me) {
      auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub);
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::curve_serverkey, server.public_key);
      s->set(zmq::sockopt::curve_publickey, me.public_key);
      s->set(zmq::sockopt::curve_secretkey, me.secret_key);
      s->set(zmq::sockopt::subscribe, "");
      s->set(zmq::sockopt::rcvtimeo, 200);
      s->connect(spec.endpoint);
      return s;
    };
    auto good = subscriber(client), bad = subscriber(stranger);
    // A subscription takes effect some time after connecting: publish until the good one hears.
    kv::kv_event_batch b;
    kv::kv_event e;
    e.kind = kv::kv_event_kind::stored;
    e.hashes = {42};
    e.token_ids = {777777, 777778, 777779, 777780};
    e.block_size = 4;
    b.events.push_back(e);
    std::string payload;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (payload.empty() && std::chrono::steady_clock::now() < deadline) {
      pub.publish(b);
      zmq::message_t topic, seq, body;
      if (good->recv(topic)) {
        (void)good->recv(seq);
        (void)good->recv(body);
        payload = body.to_string();
      }
    }
    BOOST_TEST_REQUIRE(!payload.empty(), "the authorized subscriber got nothing");
    zmq::message_t m;
    BOOST_TEST(!bad->recv(m), "an unauthorized subscriber got an event");
    const std::string token = "\xce\x00\x0b\xde\x31";  // 777777 as a msgpack uint32
    BOOST_TEST((payload.find(token) != std::string::npos) == token_ids);
  }
}
