#define BOOST_TEST_MODULE block_pool
#include <boost/test/unit_test.hpp>

#include "runtime/kv/block_pool.h"
#include "tests/support/kv_blocks.h"

using namespace troupe::kv;
using troupe::test::blocks;

BOOST_AUTO_TEST_CASE(allocates_in_free_list_order_and_frees_on_last_release) {
  block_pool p(4);
  auto a = p.allocate(2);
  BOOST_TEST(a == (blocks({0, 1})));
  BOOST_TEST(p.num_free() == 2);
  p.share(a[1]);
  p.release(a);
  BOOST_TEST(p.ref_count(block_id(0)) == 0);
  BOOST_TEST(p.ref_count(block_id(1)) == 1);  // still held by the sharer
  BOOST_TEST(p.num_free() == 3);
  // Freed blocks go to the back: the never-used ones come first.
  BOOST_TEST(p.allocate(2) == (blocks({2, 3})));
  p.release({block_id(1)});
  BOOST_TEST(p.allocate(2) == (blocks({0, 1})));
}

BOOST_AUTO_TEST_CASE(allocation_is_all_or_nothing) {
  block_pool p(3);
  BOOST_TEST(p.allocate(4).empty());
  BOOST_TEST(p.num_free() == 3);
  BOOST_TEST(p.allocate(3).size() == 3u);
  BOOST_TEST(p.allocate(1).empty());
}

BOOST_AUTO_TEST_CASE(blocks_for_rounds_up) {
  BOOST_TEST(blocks_for(0, 16) == 0);
  BOOST_TEST(blocks_for(1, 16) == 1);
  BOOST_TEST(blocks_for(16, 16) == 1);
  BOOST_TEST(blocks_for(17, 16) == 2);
}
