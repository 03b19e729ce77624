// The shared-memory collectives (runtime/collectives/shm.h) against plain references on random
// inputs, for groups of 1 to 4 ranks on threads: every operation gives the reference on every
// rank, reductions are bitwise the same on every rank and run after run, and a group whose rank
// dies (abort) or never comes fails every waiting rank with an error instead of hanging.
#define BOOST_TEST_MODULE collectives
#include <boost/test/unit_test.hpp>

#include <functional>
#include <random>
#include <thread>

#include "runtime/collectives/shm.h"
#include "tests/support/random.h"

using namespace troupe;
using namespace troupe::collectives;

namespace {

// Runs `body(rank, comm)` on one thread per rank; returns each rank's error text ("" if none).
std::vector<std::string> run_group(std::vector<std::unique_ptr<communicator>>& group,
                                   const std::function<void(int, communicator&)>& body) {
  std::vector<std::string> errors(group.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(int(r), *group[r]);
      } catch (const collective_error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_operation_matches_its_reference_on_every_rank) {
  for (int size = 1; size <= 4; ++size) {
    auto group = make_shm_group({size, 1, std::chrono::milliseconds(60000)});
    const std::size_t n = 37;  // not a multiple of anything
    std::vector<std::vector<float>> in;
    for (int r = 0; r < size; ++r) in.push_back(test::random_floats(n * std::size_t(size), unsigned(100 * size + r)));
    // References, summed in rank order.
    std::vector<float> sum(n * std::size_t(size)), mx(n * std::size_t(size));
    for (std::size_t i = 0; i < sum.size(); ++i) {
      sum[i] = in[0][i];
      mx[i] = in[0][i];
      for (int r = 1; r < size; ++r) {
        sum[i] += in[std::size_t(r)][i];
        mx[i] = std::max(mx[i], in[std::size_t(r)][i]);
      }
    }
    const std::size_t ranks = std::size_t(size);
    std::vector<std::vector<float>> reduced(ranks), maxed(ranks), gathered(ranks), scattered(ranks), exchanged(ranks), received(ranks);
    const auto errors = run_group(group, [&](int r, communicator& c) {
      const std::size_t R = std::size_t(r);  // (Boost.Test's checks are not thread-safe: results are checked after the join)
      if (c.rank() != r || c.size() != size) throw collective_error("rank " + std::to_string(r) + " has the wrong rank or size");
      reduced[R] = in[R];
      c.all_reduce(reduced[R]);
      maxed[R] = in[R];
      c.all_reduce(maxed[R], reduce_op::max);
      gathered[R].resize(n * std::size_t(size));
      c.all_gather(std::span<const float>(in[R]).first(n), gathered[R]);
      scattered[R].resize(n);
      c.reduce_scatter(in[R], scattered[R]);
      exchanged[R].resize(n * std::size_t(size));
      c.all_to_all(in[R], exchanged[R]);
      if (size > 1) {  // a ring of sends: each rank passes its first n values to the next
        received[R].resize(n);
        c.send(std::span<const float>(in[R]).first(n), (r + 1) % size);
        c.recv(received[R], (r + size - 1) % size);
      }
    });
    for (int r = 0; r < size; ++r) {
      const std::size_t R = std::size_t(r);
      BOOST_TEST(errors[R].empty(), errors[R]);
      BOOST_TEST(reduced[R] == sum, "all_reduce, rank " << r << " of " << size);  // bitwise: the same order everywhere
      BOOST_TEST(maxed[R] == mx);
      for (int q = 0; q < size; ++q)
        for (std::size_t i = 0; i < n; ++i) {
          BOOST_TEST(gathered[R][std::size_t(q) * n + i] == in[std::size_t(q)][i]);
          BOOST_TEST(exchanged[R][std::size_t(q) * n + i] == in[std::size_t(q)][R * n + i]);
        }
      for (std::size_t i = 0; i < n; ++i) BOOST_TEST(scattered[R][i] == sum[R * n + i]);
      if (size > 1)
        for (std::size_t i = 0; i < n; ++i) BOOST_TEST(received[R][i] == in[std::size_t((r + size - 1) % size)][i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rank_that_dies_fails_every_waiting_rank_and_nothing_hangs) {
  auto group = make_shm_group({3, 7, std::chrono::milliseconds(60000)});
  const auto errors = run_group(group, [&](int r, communicator& c) {
    std::vector<float> v(8, float(r));
    c.all_reduce(v);  // one that succeeds
    if (r == 1) return c.abort("rank 1's worker died");  // the others are (or will be) waiting in the next
    c.all_reduce(v);
  });
  BOOST_TEST(errors[1].empty());
  for (int r : {0, 2}) {
    BOOST_TEST(errors[std::size_t(r)].find("rank 1's worker died") != std::string::npos, errors[std::size_t(r)]);
    BOOST_TEST(errors[std::size_t(r)].find("generation 7") != std::string::npos, errors[std::size_t(r)]);
  }
  // The generation stays failed: a later call fails at once, with the reason.
  std::vector<float> v(4);
  BOOST_CHECK_THROW(group[0]->all_reduce(v), collective_error);
  std::vector<float> got(4);
  BOOST_CHECK_THROW(group[2]->recv(got, 0), collective_error);
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_comes_or_calls_another_operation_fails_the_group) {
  {
    auto group = make_shm_group({2, 1, std::chrono::milliseconds(200)});
    std::vector<float> v(4);
    try {
      group[0]->all_reduce(v);  // rank 1 never calls
      BOOST_FAIL("all_reduce returned without rank 1");
    } catch (const collective_error& e) {
      BOOST_TEST(std::string(e.what()).find("waited past its deadline for rank(s) 1") != std::string::npos, e.what());
    }
  }
  {
    auto group = make_shm_group({2, 1, std::chrono::milliseconds(60000)});
    const auto errors = run_group(group, [&](int r, communicator& c) {
      std::vector<float> v(4), all(8);
      if (r == 0) c.all_reduce(v);
      else c.all_gather(std::span<const float>(v), all);
    });
    for (const auto& e : errors) BOOST_TEST(e.find("met rank") != std::string::npos, e);
  }
  auto one = make_shm_group({2, 1, std::chrono::milliseconds(1000)});
  std::vector<float> v(4), small(3);
  BOOST_CHECK_THROW(one[0]->send(v, 0), collective_error);      // itself
  BOOST_CHECK_THROW(one[0]->send(v, 5), collective_error);      // no such rank
  BOOST_CHECK_THROW(one[0]->all_gather(v, small), collective_error);  // output too small
  BOOST_CHECK_THROW(make_shm_group({0, 1, std::chrono::milliseconds(1)}), collective_error);
}
