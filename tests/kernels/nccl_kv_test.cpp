// The NCCL path of the KV transfer engine where a GPU exists: blocks moved by NCCL send/recv
// arrive byte for byte (f32, f16 and bf16 caches are all bytes to it: the block sizes of each
// are covered). Without a device the check must say so, and the test passes having checked that.
#define BOOST_TEST_MODULE nccl_kv
#include <boost/test/unit_test.hpp>

#include "kernels/cuda/device.h"
#include "kernels/cuda/nccl_kv.h"

using namespace troupe::kernels::cuda;

BOOST_AUTO_TEST_CASE(blocks_moved_by_nccl_arrive_intact_or_the_absence_of_a_device_is_reported) {
  if (!nccl_built() || device_count() == 0) {
    const std::string why = nccl_self_check(0, 4, 4096);
    BOOST_TEST(!why.empty(), "no device, yet the check claimed success");
    BOOST_TEST_MESSAGE("skipped: " << (nccl_built() ? "no CUDA device" : "NCCL not built") << " (" << why << ")");
    return;
  }
  // One block of one layer: 16 tokens x 8 KV heads x 128 dims, in f32 and in f16/bf16.
  for (std::size_t bytes : {std::size_t(16 * 8 * 128 * 4), std::size_t(16 * 8 * 128 * 2)})
    for (int blocks : {1, 7, 256}) BOOST_TEST(nccl_self_check(0, blocks, bytes) == "", blocks << " blocks of " << bytes << " bytes");
}
