// The NCCL collectives backend (runtime/collectives/nccl.h) where GPUs exist: groups of 1 up to
// the number of devices (at most 4), one rank per device on threads, against plain references
// on random inputs, with reductions bitwise equal on every rank (rank-order sums, as every
// backend); a ring of sends; and a group whose other rank never comes fails by its deadline
// instead of hanging. Without a device (or without NCCL in the build) the backend must refuse
// with an error saying so, and the test passes having checked that.
#define BOOST_TEST_MODULE collectives_nccl
#include <boost/test/unit_test.hpp>

#include <functional>
#include <thread>

#include "kernels/cuda/device.h"
#include "runtime/collectives/nccl.h"
#include "tests/support/random.h"

using namespace troupe;
using namespace troupe::collectives;

namespace {

int devices() { return kernels::cuda::device_count(); }

// True when this machine has fewer than `need` devices: then the backend must refuse, saying
// why (checked here), and the caller's case has nothing more to run.
bool too_few_devices(int need) {
  if (devices() >= need) return false;
  if (devices() > 0) {
    BOOST_TEST_MESSAGE("needs " << need << " devices, this machine has " << devices());
    BOOST_TEST(devices() < need);
    return true;
  }
  try {
    nccl_group_id();
    BOOST_FAIL("an NCCL group id was made without a device");
  } catch (const collective_error& e) {
    const std::string what = e.what();
    BOOST_TEST((what.find("no CUDA device") != std::string::npos || what.find("no NCCL") != std::string::npos), what);
  }
  BOOST_TEST_MESSAGE("skipped on this machine: " << kernels::cuda::describe());
  return true;
}

// Runs `body(rank, comm)` on one thread per rank, each joining the NCCL group `id` on device
// `rank`; returns each rank's error text ("" if none).
std::vector<std::string> run_group(int size, std::chrono::milliseconds timeout, int joining,
                                   const std::function<void(int, communicator&)>& body) {
  const std::string id = nccl_group_id();
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < joining; ++r)
    threads.emplace_back([&, r] {
      try {
        auto c = connect_nccl({r, size, 1, r, id, "test", timeout});
        body(r, *c);
      } catch (const collective_error& e) {
        errors[std::size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

BOOST_AUTO_TEST_CASE(without_a_device_a_rank_cannot_join) {
  if (devices() > 0) {
    BOOST_TEST_MESSAGE("this machine has a device: the cases below cover the backend");
    BOOST_TEST(devices() > 0);
    return;
  }
  try {
    connect_nccl({0, 1, 1, 0, std::string(128, '\0'), "test", std::chrono::milliseconds(1000)});
    BOOST_FAIL("an NCCL rank joined without a device");
  } catch (const collective_error& e) {
    BOOST_TEST(std::string(e.what()).find("could not join over NCCL") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(every_operation_matches_its_reference_on_every_rank) {
  if (too_few_devices(1)) return;
  for (int size = 1; size <= std::min(devices(), 4); ++size) {
    const std::size_t n = 37, ranks = std::size_t(size);
    std::vector<std::vector<float>> in;
    for (int r = 0; r < size; ++r) in.push_back(test::random_floats(n * ranks, unsigned(100 * size + r)));
    std::vector<float> sum(n * ranks), mx(n * ranks);
    for (std::size_t i = 0; i < sum.size(); ++i) {
      sum[i] = mx[i] = in[0][i];
      for (std::size_t r = 1; r < ranks; ++r) sum[i] += in[r][i], mx[i] = std::max(mx[i], in[r][i]);
    }
    std::vector<std::vector<float>> reduced(ranks), maxed(ranks), gathered(ranks), scattered(ranks), exchanged(ranks), received(ranks);
    const auto errors = run_group(size, std::chrono::milliseconds(60000), size, [&](int r, communicator& c) {
      const std::size_t R = std::size_t(r);  // checked after the join (Boost.Test is not thread-safe)
      reduced[R] = in[R];
      c.all_reduce(reduced[R]);
      maxed[R] = in[R];
      c.all_reduce(maxed[R], reduce_op::max);
      gathered[R].resize(n * ranks);
      c.all_gather(std::span<const float>(in[R]).first(n), gathered[R]);
      scattered[R].resize(n);
      c.reduce_scatter(in[R], scattered[R]);
      exchanged[R].resize(n * ranks);
      c.all_to_all(in[R], exchanged[R]);
      if (size > 1) {  // a ring: each rank passes its first n values to the next
        received[R].resize(n);
        c.send(std::span<const float>(in[R]).first(n), (r + 1) % size);
        c.recv(received[R], (r + size - 1) % size);
      }
    });
    for (std::size_t r = 0; r < ranks; ++r) {
      BOOST_TEST(errors[r].empty(), errors[r]);
      BOOST_TEST(reduced[r] == sum, "all_reduce, rank " << r << " of " << size);
      BOOST_TEST(maxed[r] == mx);
      for (std::size_t q = 0; q < ranks; ++q)
        for (std::size_t i = 0; i < n; ++i) {
          BOOST_TEST(gathered[r][q * n + i] == in[q][i]);
          BOOST_TEST(exchanged[r][q * n + i] == in[q][r * n + i]);
        }
      for (std::size_t i = 0; i < n; ++i) BOOST_TEST(scattered[r][i] == sum[r * n + i]);
      if (size > 1)
        for (std::size_t i = 0; i < n; ++i) BOOST_TEST(received[r][i] == in[(r + ranks - 1) % ranks][i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rank_that_never_comes_fails_the_group_by_its_deadline) {
  if (too_few_devices(2)) return;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_group(2, std::chrono::milliseconds(3000), 1, [](int, communicator&) {});
  BOOST_TEST(errors[0].find("could not join over NCCL") != std::string::npos, errors[0]);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)));
}
