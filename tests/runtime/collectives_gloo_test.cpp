// The Gloo collectives (runtime/collectives/gloo.h) over TCP on loopback: every operation gives
// the same bits as the shared-memory backend on random inputs (ranks on threads, each with its
// own connections), a rank in another process that dies makes the waiting rank's call fail
// with an error instead of hanging, and so does an abort while the peer is silent.
#define BOOST_TEST_MODULE collectives_gloo
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "runtime/collectives/gloo.h"
#include "runtime/collectives/shm.h"
#include "tests/support/random.h"

using namespace troupe;
using namespace troupe::collectives;

namespace {

std::string fresh_dir(const std::string& name) {
  const auto d = std::filesystem::path(TROUPE_BINARY_DIR) / "collectives-gloo" / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// Every operation once on rank r's communicator; returns everything it produced, in order.
std::vector<float> exercise(communicator& c, const std::vector<float>& in, std::size_t n) {
  const int size = c.size(), r = c.rank();
  std::vector<float> out, v = in, all(n * std::size_t(size)), mine(n), ex(in.size()), got(n);
  c.all_reduce(v);
  out.insert(out.end(), v.begin(), v.end());
  v = in;
  c.all_reduce(v, reduce_op::max);
  out.insert(out.end(), v.begin(), v.end());
  c.all_gather(std::span<const float>(in).first(n), all);
  out.insert(out.end(), all.begin(), all.end());
  c.reduce_scatter(in, mine);
  out.insert(out.end(), mine.begin(), mine.end());
  c.all_to_all(in, ex);
  out.insert(out.end(), ex.begin(), ex.end());
  if (size > 1) {
    c.send(std::span<const float>(in).first(n), (r + 1) % size);
    c.recv(got, (r + size - 1) % size);
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_operation_gives_the_shared_memory_backends_bits) {
  for (int size : {2, 3}) {
    const std::size_t n = 29;
    std::vector<std::vector<float>> in;
    for (int r = 0; r < size; ++r) in.push_back(test::random_floats(n * std::size_t(size), unsigned(7 * size + r)));
    auto shm = make_shm_group({size, 1, std::chrono::milliseconds(60000)});
    const std::string dir = fresh_dir("ops" + std::to_string(size));
    const std::size_t ranks = std::size_t(size);
    std::vector<std::vector<float>> want(ranks), got(ranks);
    std::vector<std::string> errors(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          want[std::size_t(r)] = exercise(*shm[std::size_t(r)], in[std::size_t(r)], n);
          auto c = connect_gloo({r, size, 1, "test", dir, "127.0.0.1", std::chrono::milliseconds(60000)});
          got[std::size_t(r)] = exercise(*c, in[std::size_t(r)], n);
        } catch (const std::exception& e) {
          errors[std::size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      BOOST_TEST(errors[std::size_t(r)].empty(), errors[std::size_t(r)]);
      BOOST_TEST(got[std::size_t(r)] == want[std::size_t(r)], "rank " << r << " of " << size);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rank_whose_process_dies_fails_the_waiting_rank) {
  // Writing to the dead peer's socket raises SIGPIPE; troupe's processes ignore it (they serve
  // sockets), and so must this one, or the signal ends the test instead of the error.
  ::signal(SIGPIPE, SIG_IGN);
  const std::string dir = fresh_dir("death");
  // Rank 1 dies once both ranks are connected (rank 0 says so through the pipe): a death
  // during the rendezvous would fail the connect instead, which is not what is under test.
  int connected[2];
  BOOST_TEST_REQUIRE(::pipe(connected) == 0);
  const pid_t child = ::fork();
  if (child == 0) {  // rank 1: connects, then dies before the collective
    try {
      auto c = connect_gloo({1, 2, 4, "test", dir, "127.0.0.1", std::chrono::milliseconds(20000)});
      char byte;
      if (::read(connected[0], &byte, 1) == 1) ::kill(::getpid(), SIGKILL);
    } catch (...) {
    }
    ::_exit(1);
  }
  auto c = connect_gloo({0, 2, 4, "test", dir, "127.0.0.1", std::chrono::milliseconds(20000)});
  BOOST_TEST_REQUIRE(::write(connected[1], "x", 1) == 1);
  std::vector<float> v(64, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c->all_reduce(v);
    BOOST_FAIL("all_reduce returned with its peer dead");
  } catch (const collective_error& e) {
    BOOST_TEST(std::string(e.what()).find("generation 4") != std::string::npos, e.what());
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(waited < 20.0);  // failed, did not wait out its deadline
  BOOST_CHECK_THROW(c->all_reduce(v), collective_error);                        // and stays failed
  int status = 0;
  ::waitpid(child, &status, 0);
}

// A rank's group can be aborted while its peer is alive but silent (that peer's process died
// and its socket has not said so yet, or it hangs): the abort itself must wake the call waiting
// here, naming the abort's reason, and not leave it to its deadline. The peer's next call fails
// too: the abort closed its connections.
BOOST_AUTO_TEST_CASE(an_abort_wakes_a_call_waiting_on_a_silent_peer) {
  ::signal(SIGPIPE, SIG_IGN);
  for (int round = 0; round < 3; ++round) {
    const std::string dir = fresh_dir("abort" + std::to_string(round));
    const auto deadline = std::chrono::milliseconds(30000);
    std::shared_ptr<communicator> peer;
    std::thread connecting([&] { peer = connect_gloo({1, 2, 5, "test", dir, "127.0.0.1", deadline}); });
    std::shared_ptr<communicator> c = connect_gloo({0, 2, 5, "test", dir, "127.0.0.1", deadline});
    connecting.join();
    BOOST_TEST_REQUIRE(bool(peer));

    std::mutex mu;
    std::condition_variable cv;
    bool calling = false;
    std::string error;
    std::thread waiting([&] {
      std::vector<float> v(64, 1.0f);
      {
        std::lock_guard<std::mutex> lock(mu);
        calling = true;
      }
      cv.notify_one();
      try {
        c->all_reduce(v);
      } catch (const collective_error& e) {
        error = e.what();
      }
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return calling; });
    }
    c->abort("rank 1 died (test)");
    waiting.join();
    BOOST_TEST(error.find("rank 1 died (test)") != std::string::npos, "round " << round << ": " << error);
    std::vector<float> v(64, 1.0f);
    BOOST_CHECK_THROW(c->all_reduce(v), collective_error);     // it stays failed
    BOOST_CHECK_THROW(peer->all_reduce(v), collective_error);  // and so does its peer
  }
}
