// Window groups (kv/window_groups.h) and the block manager's window pages: which layers share a
// page, pages held only while a block is in some sequence's window, idle pages a prefix hit can
// still use, hits cut where the window's pages are gone, and every page back at the end.
#define BOOST_TEST_MODULE window_pages
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "runtime/kv/kv_cache_manager.h"
#include "runtime/kv/window_groups.h"

using namespace troupe::kv;

namespace {

constexpr int bs = 4, window = 8, groups = 2;  // a block costs 3 pages while in a window

kv_cache_manager manager(int pages, bool prefix_caching = true) {
  kv_manager_config c;
  c.num_blocks = pages;
  c.block_size = bs;
  c.prefix_caching = prefix_caching;
  c.window_groups = groups;
  c.window = window;
  return kv_cache_manager(c);
}

std::vector<std::int32_t> tokens(int n) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), 7);
  return t;
}

std::vector<block_hash> hashes_of(const std::vector<std::int32_t>& t) {
  std::vector<block_hash> h;
  extend_block_hashes(h, t, bs, {root_hash("m"), 0, false});
  return h;
}

// Sequence `s` computes `t` one block at a time, as decode steps would: allocate, register, slide.
void compute(kv_cache_manager& m, seq_id s, const std::vector<std::int32_t>& t) {
  const auto h = hashes_of(t);
  for (int done = 0; done < int(t.size()); done += bs) {
    BOOST_TEST_REQUIRE(m.allocate(s, 1));
    const int computed = std::min(done + bs, int(t.size()));
    m.cache_blocks(s, h, t, computed / bs);
    m.slide(s, computed);
  }
}

// Group g's table of `s`, as a plan carries it.
std::vector<std::int32_t> group_table(const kv_cache_manager& m, seq_id s, int g) {
  std::vector<std::vector<std::vector<std::int32_t>>> tables;
  m.append_group_tables(s, tables);
  return tables.at(std::size_t(g - 1)).at(0);
}

int held_groups_of(const kv_cache_manager& m, seq_id s) {
  int n = 0;
  for (auto p : group_table(m, s, 1)) n += p >= 0 ? 1 : 0;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(layers_are_dealt_into_groups_as_wide_as_the_global_layers) {
  // Gemma 3 1B: 26 layers, every sixth global: 4 global, 22 windowed in 6 groups of 4 slots.
  std::vector<int> gemma3(26, 512);
  for (int l = 5; l < 26; l += 6) gemma3[std::size_t(l)] = 0;
  const auto g = window_groups_of(gemma3);
  BOOST_TEST(g.count == 6);
  BOOST_TEST(g.window == 512);
  BOOST_TEST(g.pages_per_block() == 7);
  BOOST_TEST(g.group[5] == 0);
  BOOST_TEST(g.slot[5] == 0);
  BOOST_TEST(g.slot[23] == 3);  // the fourth global layer
  BOOST_TEST(g.group[0] == 1);
  BOOST_TEST(g.slot[3] == 3);
  BOOST_TEST(g.group[4] == 2);  // the fifth windowed layer opens the second group
  BOOST_TEST(g.group[25] == 6);
  BOOST_TEST(g.slot[25] == 1);  // 22 = 5 * 4 + 2: the last group is padded
  // Gemma 2: alternating, one group; every layer windowed (Mistral 7B v0.1) or none: not split.
  BOOST_TEST(window_groups_of({4096, 0, 4096, 0}).count == 1);
  BOOST_TEST(!window_groups_of({4096, 4096}).split());
  BOOST_TEST(!window_groups_of({0, 0}).split());
  BOOST_TEST(first_block_in_window(100, 512, 16) == 0);
  BOOST_TEST(first_block_in_window(527, 512, 16) == 1);  // positions 16..527
}

BOOST_AUTO_TEST_CASE(window_pages_are_held_only_while_in_the_window) {
  auto m = manager(100);
  compute(m, 1, tokens(40));  // 10 blocks; the next token, at 40, attends to 33..40: blocks 8, 9
  BOOST_TEST(m.num_blocks_of(1) == 10);
  BOOST_TEST(m.num_window_pages_held() == 2 * groups);
  BOOST_TEST(held_groups_of(m, 1) == 2);
  BOOST_TEST(m.num_used() == 10 + 2 * groups);  // memory stops growing with the context
  const auto g1 = group_table(m, 1, 1), g2 = group_table(m, 1, 2);
  BOOST_TEST(g1[7] == -1);
  BOOST_TEST(g1[8] >= 0);
  BOOST_TEST(g1[9] != g2[9]);
  BOOST_TEST(m.num_exclusive(1) == 10 + 2 * groups);
  m.free(1);
  BOOST_TEST(m.num_free() == m.num_blocks());
  BOOST_TEST(m.num_window_pages_held() == 0);
}

BOOST_AUTO_TEST_CASE(a_hit_reuses_idle_window_pages_and_is_cut_where_they_are_gone) {
  auto m = manager(18);  // 10 blocks and the pages of 3 windows: pages let go of are soon reused
  const auto t = tokens(40);
  compute(m, 1, t);
  BOOST_TEST(m.num_used() == 10 + 2 * groups);
  m.free(1);  // its last window's pages stay with their blocks, in the free list
  // The same 40 tokens and one more: a hit of all 10 blocks (the window 33..40 has its pages).
  auto longer = t;
  longer.push_back(99);
  auto hit = m.find_prefix(hashes_of(longer), 10);
  BOOST_TEST(hit.blocks.size() == 10u);
  BOOST_TEST(hit.evictable == 10 + 2 * groups);
  m.attach_prefix(2, hit);
  BOOST_TEST(held_groups_of(m, 2) == 2);
  BOOST_TEST(m.num_window_pages_held() == 2 * groups);
  m.free(2);
  // Its first 24 tokens and more: block 5 would need blocks 4 and 5's pages, gone long ago;
  // nothing before is usable either (every window there lost its pages).
  auto other = std::vector<std::int32_t>(t.begin(), t.begin() + 24);
  other.push_back(5);
  BOOST_TEST(m.find_prefix(hashes_of(other), 6).blocks.empty());
  BOOST_TEST(m.prefix_length(hashes_of(other), 6) == 0);
  BOOST_TEST(m.prefix_length(hashes_of(longer), 10) == 10);
}

BOOST_AUTO_TEST_CASE(sharing_a_block_keeps_its_pages_until_every_holder_moves_on) {
  auto m = manager(100);
  const auto t = tokens(16);
  compute(m, 1, t);  // blocks 0..3; holds the pages of 2, 3
  auto hit = m.find_prefix(hashes_of(t), 3);  // 12 tokens found: block 1 and 2's window
  BOOST_TEST_REQUIRE(hit.blocks.size() == 3u);  // block 1's pages are idle, not reused yet
  m.attach_prefix(2, hit);
  // It shares every page it holds but block 1's window pages (1 had moved past block 1).
  BOOST_TEST(m.num_exclusive(2) == groups);
  BOOST_TEST_REQUIRE(m.allocate(2, 1));
  m.slide(2, 16);
  m.slide(1, 40);  // 1 moves past all of its blocks; 2 still holds 2, 3 (3: its own)
  BOOST_TEST(held_groups_of(m, 1) == 0);
  BOOST_TEST(held_groups_of(m, 2) == 2);
  m.free(2);
  m.free(1);
  BOOST_TEST(m.num_free() == m.num_blocks());
}

BOOST_AUTO_TEST_CASE(a_reused_page_takes_its_window_from_the_block_it_served) {
  auto m = manager(12);  // 4 blocks' worth of pages at most
  const auto t = tokens(8);
  compute(m, 1, t);
  m.free(1);  // 2 cached blocks, their window pages idle
  BOOST_TEST(m.find_prefix(hashes_of(tokens(9)), 2).blocks.size() == 2u);
  BOOST_TEST_REQUIRE(m.allocate(2, 4));  // every page, the idle ones first
  BOOST_TEST(m.find_prefix(hashes_of(tokens(9)), 2).blocks.empty());
  BOOST_TEST(!m.allocate(3, 1));
  m.truncate(2, 1);  // gives back 3 blocks and their pages
  BOOST_TEST(m.num_free() == 9);
  m.free(2);
  BOOST_TEST(m.num_free() == m.num_blocks());
}
