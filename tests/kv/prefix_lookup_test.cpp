#define BOOST_TEST_MODULE prefix_lookup
#include <boost/test/unit_test.hpp>

#include <vector>

#include "runtime/kv/prefix_lookup.h"

// One step's admission lookups without an engine: what is found, who waits for a block another
// sequence is computing, what a pull leaves out, and the step's bound.
using namespace troupe::kv;

namespace {

constexpr int bs = 4;

// A cache of 16 blocks in which sequence 1 computed and cached blocks with hashes 10, 11, 12,
// then ended (its blocks free, still findable).
kv_cache_manager cache_with_prefix() {
  kv_cache_manager kv({16, bs, true, false});
  const std::vector<block_hash> hashes{10, 11, 12};
  const std::vector<std::int32_t> tokens(12, 7);
  BOOST_REQUIRE(kv.allocate(1, 3));
  kv.cache_blocks(1, hashes, tokens, 3);
  kv.free(1);
  return kv;
}

}  // namespace

BOOST_AUTO_TEST_CASE(finds_the_cached_prefix_but_never_the_last_token) {
  auto kv = cache_with_prefix();
  prefix_lookup look(kv, 8);
  const std::vector<block_hash> h{10, 11, 12};
  const auto a = look.fresh(2, h, 12, 12);  // 12 tokens: the third block holds its last token
  BOOST_TEST(a.looked);
  BOOST_TEST(!a.wait);
  BOOST_TEST(a.blocks == 2);
  BOOST_TEST(a.tokens == 8);
  BOOST_TEST(a.evictable == 2);  // free blocks: taking them costs free blocks
  const auto at = look.attach(kv, 2, 12);
  BOOST_TEST(at.found);
  BOOST_TEST(at.blocks == 2);
  BOOST_TEST(kv.num_blocks_of(2) == 2);
  BOOST_TEST(kv.stats().hits == 8u);
  BOOST_TEST(kv.stats().queries == 12u);
}

BOOST_AUTO_TEST_CASE(waits_for_a_block_a_running_prefill_computes) {
  auto kv = cache_with_prefix();
  prefix_lookup look(kv, 8);
  const std::vector<block_hash> h{10, 11, 12, 13, 14};
  look.computing(h, 3);  // a running prefill computes blocks 13 and 14 this step
  const std::vector<block_hash> mine{10, 11, 12, 13};
  const auto a = look.fresh(2, mine, 20, 20);
  BOOST_TEST(a.blocks == 3);
  BOOST_TEST(a.wait);  // its next block (13) is being computed: it waits rather than compute it twice
  BOOST_TEST(!look.attach(kv, 2, 20).found);
  const std::vector<block_hash> other{10, 11, 12, 99};
  BOOST_TEST(!look.fresh(3, other, 20, 20).wait);  // another continuation does not wait
}

BOOST_AUTO_TEST_CASE(an_admitted_sequence_makes_later_ones_wait) {
  kv_cache_manager kv({16, bs, true, false});
  prefix_lookup look(kv, 8);
  const std::vector<block_hash> h{20, 21, 22};
  BOOST_TEST(!look.fresh(1, h, 12, 12).wait);  // nothing cached: if admitted, it computes 20, 21, 22
  BOOST_TEST(look.fresh(2, h, 12, 12).wait);   // the same prompt behind it waits for block 20
}

BOOST_AUTO_TEST_CASE(a_pull_leaves_out_what_is_cached_here) {
  auto kv = cache_with_prefix();
  prefix_lookup look(kv, 8);
  const std::vector<block_hash> h{10, 11, 12, 13};
  const auto a = look.to_pull(5, h, 12);  // 12 positions of KV to pull: three blocks
  BOOST_TEST(a.blocks == 3);
  BOOST_TEST(a.tokens == 0);  // a pulled sequence's computed count comes from its handle
  const auto at = look.attach(kv, 5, 16);
  BOOST_TEST(at.blocks == 3);
  BOOST_TEST(at.tokens == 12);
}

BOOST_AUTO_TEST_CASE(looks_up_no_more_than_a_step_admits) {
  auto kv = cache_with_prefix();
  prefix_lookup look(kv, 2);
  const std::vector<block_hash> h{10, 11, 12};
  BOOST_TEST(look.fresh(1, h, 12, 12).looked);
  BOOST_TEST(look.to_pull(2, h, 8).looked);
  BOOST_TEST(!look.fresh(3, h, 12, 12).looked);
  BOOST_TEST(!look.attach(kv, 3, 12).found);
}
