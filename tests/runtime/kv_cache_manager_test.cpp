// The prefix cache's bookkeeping: hits by reference count, shared blocks never handed out for
// writing, eviction least recently freed first (a sequence's tail before its head), tenant
// salts that never meet, and every block back in the free list at the end.
#define BOOST_TEST_MODULE kv_cache_manager
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "runtime/kv/kv_cache_manager.h"
#include "tests/support/kv_blocks.h"

using namespace troupe::kv;
using troupe::test::blocks;

namespace {

constexpr int bs = 4;

std::vector<std::int32_t> tokens(int n, int first = 100) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<block_hash> hashes_of(const std::vector<std::int32_t>& t, const hash_keys& k) {
  std::vector<block_hash> h;
  extend_block_hashes(h, t, bs, k);
  return h;
}

// Computes `t` for sequence `s` from scratch: allocate, then register every full block.
void compute(kv_cache_manager& m, seq_id s, const std::vector<std::int32_t>& t, const hash_keys& k) {
  BOOST_TEST_REQUIRE(m.allocate(s, blocks_for(int(t.size()), bs)));
  m.cache_blocks(s, hashes_of(t, k), t, int(t.size()) / bs);
}

void all_free(const kv_cache_manager& m) {
  BOOST_TEST(m.num_free() == m.num_blocks());
  for (int b = 0; b < m.num_blocks(); ++b) BOOST_TEST(m.pool().ref_count(block_id(b)) == 0);
  BOOST_TEST(int(m.pool().free_list().size()) == m.num_blocks());
}

}  // namespace

BOOST_AUTO_TEST_CASE(siphash_matches_the_published_vectors) {
  // SipHash-2-4 reference: key 00..0f; message 00..(n-1); outputs from the paper's appendix.
  std::uint8_t key[16];
  std::iota(key, key + 16, std::uint8_t(0));
  std::vector<std::uint8_t> msg;
  BOOST_TEST(siphash(key, msg) == 0x726fdb47dd0e0e31ull);
  for (std::uint8_t i = 0; i < 15; ++i) msg.push_back(i);
  BOOST_TEST(siphash(key, msg) == 0xa129ca6149be45e5ull);
}

BOOST_AUTO_TEST_CASE(hashes_chain_and_depend_on_model_and_tenant) {
  const auto t = tokens(12);
  const hash_keys a{root_hash("m@1"), salt_key("alice"), 0};
  const auto h = hashes_of(t, a);
  BOOST_TEST(h.size() == 3u);
  BOOST_TEST(h == hashes_of(t, a));  // deterministic
  BOOST_TEST(h[0] == chain_hash(a.root, a.tenant, std::span(t).subspan(0, bs)));
  BOOST_TEST(h[1] == chain_hash(h[0], a.tenant, std::span(t).subspan(bs, bs)));
  BOOST_TEST(hashes_of(t, {root_hash("m@2"), a.tenant, 0})[0] != h[0]);  // another revision
  BOOST_TEST(hashes_of(t, {a.root, salt_key("bob"), 0})[0] != h[0]);     // another tenant
  auto changed = t;
  changed[1] = 7;  // one token early on changes every later block
  const auto hc = hashes_of(changed, a);
  for (int i = 0; i < 3; ++i) BOOST_TEST(hc[std::size_t(i)] != h[std::size_t(i)]);
  // A public prefix of 8 tokens: its 2 whole blocks are the same for every tenant.
  const auto pa = hashes_of(t, {a.root, salt_key("alice"), 8}), pb = hashes_of(t, {a.root, salt_key("bob"), 8});
  BOOST_TEST(pa[0] == pb[0]);
  BOOST_TEST(pa[1] == pb[1]);
  BOOST_TEST(pa[2] != pb[2]);
  BOOST_TEST(salt_key("") == 0u);
}

BOOST_AUTO_TEST_CASE(a_hit_shares_blocks_by_reference_and_never_hands_them_out_for_writing) {
  kv_cache_manager m({16, bs, true});
  const hash_keys k{root_hash("m"), 0, 0};
  const auto t = tokens(10);  // 2 full blocks + 2 tokens
  compute(m, 1, t, k);
  BOOST_TEST(m.num_cached() == 2);
  const auto h = hashes_of(t, k);
  const prefix_hit hit = m.find_prefix(h, 99);
  BOOST_TEST(hit.blocks.size() == 2u);
  BOOST_TEST(hit.evictable == 0);  // sequence 1 still holds them
  m.attach_prefix(2, hit);
  BOOST_TEST(m.pool().ref_count(hit.blocks[0]) == 2);
  BOOST_TEST(m.allocate(2, 1));
  const block_id own = m.table(2).back();
  BOOST_TEST(m.pool().ref_count(own) == 1);
  BOOST_TEST(own != m.table(1)[2]);
  BOOST_TEST(m.num_exclusive(2) == 1);
  m.free(1);
  BOOST_TEST(m.pool().ref_count(hit.blocks[0]) == 1);  // still sequence 2's
  m.free(2);
  all_free(m);
  BOOST_TEST(m.num_cached() == 2);  // free but findable
  const prefix_hit again = m.find_prefix(h, 99);
  BOOST_TEST(again.blocks == hit.blocks);
  BOOST_TEST(again.evictable == 2);
  BOOST_TEST(m.find_prefix(h, 1).blocks.size() == 1u);  // capped
}

BOOST_AUTO_TEST_CASE(eviction_takes_the_least_recently_freed_and_a_tail_before_its_head) {
  kv_cache_manager m({6, bs, true});
  const hash_keys k{root_hash("m"), 0, 0};
  const auto a = tokens(8, 0), b = tokens(8, 1000);  // 2 blocks each
  compute(m, 1, a, k);  // blocks 0, 1
  compute(m, 2, b, k);  // blocks 2, 3
  m.free(1);            // free list: 4 5 | 1 0 (tail first)
  m.free(2);            // free list: 4 5 1 0 3 2
  BOOST_TEST(m.pool().free_list() == (blocks({4, 5, 1, 0, 3, 2})));
  m.take_events();
  BOOST_TEST(m.allocate(3, 3));  // never-used 4, 5, then a's tail block 1
  BOOST_TEST(m.table(3) == (blocks({4, 5, 1})));
  const auto ev = m.take_events();
  BOOST_TEST_REQUIRE(ev.size() == 1u);
  BOOST_TEST(int(ev[0].kind) == int(kv_event_kind::removed));
  BOOST_TEST(ev[0].hashes == (std::vector<block_hash>{hashes_of(a, k)[1]}));
  BOOST_TEST(m.find_prefix(hashes_of(a, k), 9).blocks.size() == 1u);  // a's head survives
  BOOST_TEST(m.find_prefix(hashes_of(b, k), 9).blocks.size() == 2u);
  // The length alone, as a router asks it, agrees, capped the same way.
  BOOST_TEST(m.prefix_length(hashes_of(a, k), 9) == 1);
  BOOST_TEST(m.prefix_length(hashes_of(b, k), 9) == 2);
  BOOST_TEST(m.prefix_length(hashes_of(b, k), 1) == 1);
  BOOST_TEST(m.prefix_length(hashes_of(tokens(8, 555), k), 9) == 0);
  // A hit on a free block takes it out of the middle of the list.
  m.attach_prefix(4, m.find_prefix(hashes_of(b, k), 9));
  BOOST_TEST(m.pool().free_list() == (blocks({0})));
  m.free(3);
  m.free(4);
  all_free(m);
}

BOOST_AUTO_TEST_CASE(stored_events_carry_hashes_parent_and_tokens) {
  kv_cache_manager m({8, bs, true});
  const hash_keys k{root_hash("m"), 0, 0};
  const auto t = tokens(9);
  BOOST_TEST_REQUIRE(m.allocate(1, 3));
  const auto h = hashes_of(t, k);
  m.cache_blocks(1, h, t, 1);  // the first block is computed
  m.cache_blocks(1, h, t, 2);  // then the second
  auto ev = m.take_events();
  BOOST_TEST_REQUIRE(ev.size() == 2u);
  BOOST_TEST(!ev[0].has_parent);
  BOOST_TEST(ev[0].hashes == (std::vector<block_hash>{h[0]}));
  BOOST_TEST(ev[0].token_ids == (std::vector<std::int32_t>(t.begin(), t.begin() + bs)));
  BOOST_TEST(ev[1].has_parent);
  BOOST_TEST(ev[1].parent == h[0]);
  BOOST_TEST(ev[1].block_size == bs);
  m.clear_cache();
  ev = m.take_events();
  BOOST_TEST_REQUIRE(ev.size() == 1u);
  BOOST_TEST(int(ev[0].kind) == int(kv_event_kind::cleared));
  BOOST_TEST(m.find_prefix(h, 9).blocks.empty());
  m.free(1);
  all_free(m);
}

// Without subscribers (the cluster simulator) the cache records no events, and caches, finds
// and evicts exactly as it does with them.
BOOST_AUTO_TEST_CASE(events_off_records_nothing_and_caches_the_same) {
  const hash_keys k{root_hash("m"), 0, 0};
  const auto a = tokens(8, 0), b = tokens(8, 1000);
  kv_cache_manager on({3, bs, true}), off({3, bs, true, false, false});
  for (kv_cache_manager* m : {&on, &off}) {
    compute(*m, 1, a, k);
    m->free(1);
    compute(*m, 2, b, k);  // takes a's tail block: an eviction
    m->free(2);
  }
  BOOST_TEST(!on.take_events().empty());
  BOOST_TEST(off.take_events().empty());
  BOOST_TEST(off.find_prefix(hashes_of(a, k), 9).blocks == on.find_prefix(hashes_of(a, k), 9).blocks);
  BOOST_TEST(off.find_prefix(hashes_of(b, k), 9).blocks == on.find_prefix(hashes_of(b, k), 9).blocks);
  off.clear_cache();
  BOOST_TEST(off.take_events().empty());
  BOOST_TEST(off.find_prefix(hashes_of(b, k), 9).blocks.empty());
}

BOOST_AUTO_TEST_CASE(tenants_never_share_unless_the_prefix_is_public) {
  kv_cache_manager m({16, bs, true});
  const block_hash root = root_hash("m");
  const auto t = tokens(12);
  compute(m, 1, t, {root, salt_key("alice"), 0});
  BOOST_TEST(m.find_prefix(hashes_of(t, {root, salt_key("bob"), 0}), 9).blocks.empty());
  BOOST_TEST(m.find_prefix(hashes_of(t, {root, 0, 0}), 9).blocks.empty());
  BOOST_TEST(m.find_prefix(hashes_of(t, {root, salt_key("alice"), 0}), 9).blocks.size() == 3u);
  // A public prefix of 8 tokens computed by alice is bob's too, up to its end.
  compute(m, 2, t, {root, salt_key("alice"), 8});
  BOOST_TEST(m.find_prefix(hashes_of(t, {root, salt_key("bob"), 8}), 9).blocks.size() == 2u);
  m.free(1);
  m.free(2);
  all_free(m);
}

BOOST_AUTO_TEST_CASE(off_means_nothing_is_found_or_announced) {
  kv_cache_manager m({8, bs, false});
  const hash_keys k{root_hash("m"), 0, 0};
  const auto t = tokens(8);
  compute(m, 1, t, k);
  BOOST_TEST(m.num_cached() == 0);
  BOOST_TEST(m.find_prefix(hashes_of(t, k), 9).blocks.empty());
  BOOST_TEST(m.take_events().empty());
  m.free(1);
  all_free(m);
}
