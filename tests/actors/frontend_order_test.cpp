// The frontend's answers whatever order the owner's messages arrive in. A stream's status line
// and headers must go out before its first chunk even when the request's first tokens reach the
// frontend before the owner's acceptance: tokens come from the replica through the owner, the
// acceptance when the owner decides (a request placed late, or moved), so either may come first.
// The 30-minute soak (tools/bench/soak.sh) saw it: 43 clients read a chunk's size where the
// status line belongs ("BadStatusLine('a9\r\n')"). The owner here is a stand-in that sends a
// request's tokens before it accepts it: the order the soak hit, every time.
#define BOOST_TEST_MODULE frontend_order
#include <boost/test/unit_test.hpp>

#include <boost/asio.hpp>
#include <caf/all.hpp>

#include "actors/api/frontend.h"
#include "tests/support/cluster_run.h"

using namespace troupe;
using namespace troupe::actors;
namespace asio = boost::asio;

namespace {

// Accepts every request only after sending its two tokens (the second final) to the sink.
owner_actor::behavior_type tokens_first_owner(owner_actor::pointer self) {
  return {
      [self](submit_atom, const engine::request& r, const token_sink& sink) -> bool {
        token_update first;
        first.id = r.id;
        first.tokens = {5};
        first.prompt_tokens = std::int32_t(r.prompt.size());
        first.output_tokens = 1;
        token_update last = first;
        last.tokens = {6};
        last.output_tokens = 2;
        last.finished = true;
        last.reason = engine::finish_reason::length;
        self->send(sink, token_batch{1, {first}});
        self->send(sink, token_batch{2, {last}});
        return true;
      },
      [](abort_atom, const std::string&) {},
      [](const token_batch&) {},
      [](migrations_atom) { return std::vector<migration_event>{}; },
      [](requests_atom, std::uint32_t) { return std::vector<request_view>{}; },
      [](latency_atom) { return std::vector<pool_latency>{}; },
      [](figures_atom, double) { return std::vector<replica_figures>{}; },
      [](watch_atom, const admin_event_sink&) {},
      [](sweep_atom) {},
      [](place_atom, const std::string&, replica_id) {},
  };
}

// One request over a raw connection; everything the server sends until it closes or [DONE].
std::string exchange_raw(std::uint16_t port, const std::string& body) {
  asio::io_context ioc;
  asio::ip::tcp::socket sock{ioc};
  sock.connect({asio::ip::make_address("127.0.0.1"), port});
  timeval tv{20, 0};
  ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  asio::write(sock, asio::buffer(req));
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(sock.native_handle(), buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, std::size_t(n));
  }
  return got;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_stream_opens_before_tokens_that_came_before_its_acceptance) {
  test::config cfg;
  caf::actor_system sys{cfg};
  frontend_config fc;
  fc.http.port = 0;
  frontend f(sys, sys.spawn(tokens_first_owner), router_actor{}, fc);
  const std::string stream = exchange_raw(f.port(), R"({"prompt": [1, 2, 3], "max_tokens": 2, "stream": true})");
  BOOST_TEST(stream.rfind("HTTP/1.1 200 OK\r\n", 0) == 0, stream);
  BOOST_TEST(stream.find("X-Troupe-Model: troupe") != std::string::npos, stream);
  BOOST_TEST(stream.find("\"finish_reason\":\"length\"") != std::string::npos, stream);
  BOOST_TEST(stream.find("data: [DONE]") != std::string::npos, stream);
  // The chunks all follow the header, each once: two tokens' and [DONE].
  BOOST_TEST(stream.find("data: ") > stream.find("\r\n\r\n"));
  const std::string whole = exchange_raw(f.port(), R"({"prompt": [1, 2, 3], "max_tokens": 2})");
  BOOST_TEST(whole.rfind("HTTP/1.1 200 OK\r\n", 0) == 0, whole);
  BOOST_TEST(whole.find("X-Troupe-Model: troupe") != std::string::npos, whole);
}
