// The KV store: its index (least recently used blocks dropped first, pinned ones never, a failed
// write leaves nothing), the replicas' offer of blocks they let go of (pinned until the store has
// copied them), and the store in a running cluster: a prefix computed on one replica and let go
// of is pulled from the store by another replica, which then computes only the rest and gives
// the tokens of a full recompute.
#define BOOST_TEST_MODULE kv_store
#include <boost/test/unit_test.hpp>

#include "actors/serving/kv_store_actor.h"
#include "actors/cluster/local_cluster.h"
#include "runtime/kv/kv_cache_manager.h"
#include "runtime/kv/kv_store.h"
#include "tests/support/cluster_run.h"
#include "tests/support/kv_blocks.h"

using namespace troupe;
using namespace troupe::kv;

BOOST_AUTO_TEST_CASE(the_index_drops_the_least_recently_used_unpinned_block) {
  kv_store_index ix(3);
  std::vector<block_hash> dropped;
  for (block_hash h : {11, 12, 13}) {
    auto s = ix.reserve(h, dropped);
    BOOST_TEST_REQUIRE(s.has_value());
    ix.commit(h);
  }
  BOOST_TEST(!ix.reserve(12, dropped).has_value());  // held already
  const std::vector<block_hash> lookup = {11, 12, 99};
  const auto pinned = ix.pin_prefix(lookup);         // 11, 12 pinned and used: 13 is the oldest now
  BOOST_TEST(pinned.size() == 2u);
  BOOST_TEST_REQUIRE(ix.reserve(14, dropped).has_value());
  BOOST_TEST(dropped == std::vector<block_hash>{13});
  ix.commit(14);
  // Every other block is pinned: no room until they are unpinned.
  dropped.clear();
  const std::vector<block_hash> just14 = {14};
  auto p14 = ix.pin_prefix(just14);
  BOOST_TEST(!ix.reserve(15, dropped).has_value());
  ix.unpin(pinned);
  BOOST_TEST_REQUIRE(ix.reserve(15, dropped).has_value());
  BOOST_TEST(dropped == std::vector<block_hash>{11});
  ix.abort(15);  // its write failed: the slot is free, the hash unknown
  BOOST_TEST(ix.held() == 2);
  const std::vector<block_hash> chain = {12, 14}, gap = {12, 15, 14};
  BOOST_TEST(ix.matched(chain) == 2);
  BOOST_TEST(ix.matched(gap) == 1);  // a run of leading hashes: it stops at the first missing
  BOOST_TEST(ix.hashes() == (std::vector<block_hash>{12, 14}));
}

BOOST_AUTO_TEST_CASE(blocks_let_go_of_are_offered_once_pinned_and_skipped_if_evicted_or_held) {
  kv_cache_manager m({8, 4, true, true});
  std::vector<block_hash> hashes = {101, 102, 103};
  std::vector<std::int32_t> tokens(12);
  for (int i = 0; i < 12; ++i) tokens[std::size_t(i)] = i;
  BOOST_TEST_REQUIRE(m.allocate(1, 3));
  m.cache_blocks(1, hashes, tokens, 3);
  BOOST_TEST(m.take_offloads().empty());  // still held
  m.free(1);
  auto offered = m.take_offloads();
  BOOST_TEST_REQUIRE(offered.size() == 3u);
  BOOST_TEST(offered[0].hash == 103u);  // freed tail first
  BOOST_TEST(offered[2].hash == 101u);
  BOOST_TEST(!offered[2].has_parent);
  BOOST_TEST(offered[1].parent == 101u);
  BOOST_TEST(offered[1].tokens == (std::vector<std::int32_t>{4, 5, 6, 7}));
  BOOST_TEST(m.num_free() == 5);  // pinned: not evictable while the store copies them
  BOOST_TEST(!m.allocate(2, 6));
  BOOST_TEST(m.take_offloads().empty());  // offered once
  std::vector<block_id> ids;
  for (auto& o : offered) ids.push_back(o.block);
  m.unpin(ids);
  BOOST_TEST(m.num_free() == 8);
  BOOST_TEST(m.find_prefix(hashes, 3).blocks.size() == 3u);  // still cached after the copy
  // Let go of again, then evicted before the offer: nothing to offer.
  auto hit = m.find_prefix(hashes, 3);
  m.attach_prefix(3, hit);
  m.free(3);
  BOOST_TEST_REQUIRE(m.allocate(4, 8));
  BOOST_TEST(m.take_offloads().empty());
}

namespace {

using namespace troupe::actors;

// Two requests sharing a 160-token prefix (10 blocks) with different tails.
std::vector<engine::request> pair_with_prefix(bool greedy) {
  auto reqs = test::mixed_requests(2, test::small_model()->config().vocab_size, greedy, 60);
  for (auto& r : reqs) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < 160; ++i) p.push_back((i * 4513 + 11) % test::small_model()->config().vocab_size);
    p.insert(p.end(), r.prompt.begin(), r.prompt.end());
    r.prompt = std::move(p);
  }
  return reqs;
}

// The first request runs on replica 0 and lets go of its prefix; the store keeps it; the second
// request, on replica 1, pulls the prefix from the store. With `kv` int8 the store holds int8
// blocks (its layout is the replicas'), and the tokens are a local int8 run's.
void prefix_through_the_store(bool greedy, kernels::dtype kv = kernels::dtype::f32) {
  const auto reqs = pair_with_prefix(greedy);
  auto local_cfg = test::engine_cfg(512, 2048);
  local_cfg.kv_type = kv;
  auto local = engine::cpu_engine(test::small_model(), nullptr, local_cfg);
  const auto expected = engine::generate_all(local, reqs);
  auto topo = test::local_topology(2);  // round robin: the first request on replica 0, the second on 1
  topo.scheduler.kv_dtype = kv;
  topo.kv_store.capacity_bytes = std::size_t(64) << 20;
  test::config cfg;
  caf::actor_system sys{cfg};
  local_cluster c(sys, topo, test::small_model(), nullptr);
  BOOST_TEST_REQUIRE(bool(c.store()));
  caf::scoped_actor self{sys};
  // Told when the store holds the first request's blocks (the router is told in the same step).
  self->request(c.store(), std::chrono::seconds(30), kv_subscribe_atom::value, replica_id(0), caf::actor_cast<kv_event_sink>(self))
      .receive([](const kv_snapshot& s) { BOOST_TEST(s.hashes.empty()); }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST(test::run_request(self, c.owner(), reqs[0]) == expected[0]);
  std::size_t stored = 0;
  while (stored < 10)
    self->receive([&](kv::kv_event_batch& b) {
                    for (auto& e : b.events) {
                      BOOST_TEST(e.medium == "cpu");
                      if (e.kind == kv::kv_event_kind::stored) stored += e.hashes.size();
                    }
                  },
                  caf::after(std::chrono::seconds(30)) >> [&] { BOOST_FAIL("the store stored " << stored << " blocks"); });
  BOOST_TEST(test::run_request(self, c.owner(), reqs[1]) == expected[1], (greedy ? "greedy" : "seeded"));
  load_report r1;
  self->request(c.schedulers()[1], std::chrono::seconds(30), load_atom::value)
      .receive([&](load_report& l) { r1 = l; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST(r1.kv_pulls == 1u);
  // Replica 1 computed only what follows the 160 shared tokens.
  BOOST_TEST(r1.prompt_tokens_computed == reqs[1].prompt.size() - 160);
  store_report s;
  self->request(c.store(), std::chrono::seconds(30), load_atom::value)
      .receive([&](store_report& x) { s = x; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST(s.lookups == 1u);
  BOOST_TEST(s.hit_blocks == 10u);
  BOOST_TEST(s.stored >= 10u);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_prefix_let_go_of_on_one_replica_is_pulled_from_the_store_by_another) {
  for (bool greedy : {true, false}) prefix_through_the_store(greedy);
}

BOOST_AUTO_TEST_CASE(an_int8_prefix_comes_back_from_the_store_as_a_local_int8_run_computes_it) {
  prefix_through_the_store(true, kernels::dtype::int8);
}

BOOST_AUTO_TEST_CASE(blocks_memory_has_no_room_for_go_to_the_file_and_come_back_for_a_lookup) {
  // Memory for 12 blocks of the small model's f32 KV (256 KiB each) and a file. Replica 0 lets go
  // of prefix P (10 blocks); replica 1 then lets go of an unrelated 200-token prompt, whose blocks
  // push P's to the file; replica 2 asks for P and gets it back from the file, through memory.
  const auto pair = pair_with_prefix(false);
  auto other = test::mixed_requests(1, test::small_model()->config().vocab_size, true, 60)[0];
  other.id = "other";
  other.prompt.assign(200, 0);
  for (int i = 0; i < 200; ++i) other.prompt[std::size_t(i)] = (i * 7919 + 5) % test::small_model()->config().vocab_size;
  const auto expected = test::engine_outputs({pair[0], other, pair[1]});
  auto topo = test::local_topology(3);  // round robin: replicas 0, 1, 2 in order
  topo.kv_store.capacity_bytes = std::size_t(3) << 20;
  topo.kv_store.disk_dir = TROUPE_BINARY_DIR;
  topo.kv_store.disk_bytes = std::size_t(64) << 20;
  test::config cfg;
  caf::actor_system sys{cfg};
  local_cluster c(sys, topo, test::small_model(), nullptr);
  caf::scoped_actor self{sys};
  self->request(c.store(), std::chrono::seconds(30), kv_subscribe_atom::value, replica_id(0), caf::actor_cast<kv_event_sink>(self))
      .receive([](const kv_snapshot&) {}, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  // Waits until the store has stored `n` more blocks (in memory, as the events tell it).
  auto stored = [&](std::size_t n) {
    while (n > 0)
      self->receive([&](kv::kv_event_batch& b) {
                      for (auto& e : b.events)
                        if (e.kind == kv::kv_event_kind::stored && e.medium == "cpu") n -= std::min(n, e.hashes.size());
                    },
                    caf::after(std::chrono::seconds(30)) >> [&] { BOOST_FAIL("the store stopped short by " << n << " blocks"); });
  };
  BOOST_TEST(test::run_request(self, c.owner(), pair[0]) == expected[0]);
  stored(10);
  BOOST_TEST(test::run_request(self, c.owner(), other) == expected[1]);
  stored(12);
  BOOST_TEST(test::run_request(self, c.owner(), pair[1]) == expected[2]);
  store_report s;
  self->request(c.store(), std::chrono::seconds(30), load_atom::value)
      .receive([&](store_report& x) { s = x; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  load_report r2;
  self->request(c.schedulers()[2], std::chrono::seconds(30), load_atom::value)
      .receive([&](load_report& l) { r2 = l; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST(s.slots == 12);
  BOOST_TEST(s.disk_slots == 256);
  BOOST_TEST(s.demoted >= 10u);
  BOOST_TEST(s.promoted >= 1u);
  BOOST_TEST(s.hit_blocks == 10u);
  BOOST_TEST(s.dropped == 0u);
  BOOST_TEST(r2.kv_pulls == 1u);
  BOOST_TEST(r2.prompt_tokens_computed == pair[1].prompt.size() - 160);
}

// Two models in one process (issue 29): each has its own store. A prefix model A let go of is
// found again for A (from its store or the replica that holds it) and never for model B, whose
// replica computes the whole prompt and gives B's own tokens: the router points a request only at
// its model's stores, and each model's key roots its block hashes.
BOOST_AUTO_TEST_CASE(a_prefix_one_model_let_go_of_is_never_found_for_another) {
  const auto pair = pair_with_prefix(true);
  model::synth_options o = test::preset("small");
  o.seed = 7;  // the same shapes, other weights
  const auto other = std::shared_ptr<const model::llama_model>(model::llama_model::load(test::synth_model("small-llama-f32-seed7", o)));
  auto reference = engine::cpu_engine(other, nullptr, test::engine_cfg(512, 2048));
  const auto expected_b = engine::generate_all(reference, {pair[1]});
  const auto expected_a = test::engine_outputs({pair[0], pair[1]});
  BOOST_TEST_REQUIRE(expected_b[0] != expected_a[1]);  // the two models answer differently

  auto topo = test::local_topology(2);  // [model]: replicas 0 and 1
  topology::model_spec b;
  b.name = "b";
  b.served_names = {"b"};
  b.path = other->dir();
  topo.more_models.push_back(b);
  topology::pool_spec pool = topo.pools.front();
  pool.name = "b-pool";
  pool.model = "b";
  pool.replicas = pool.min_replicas = pool.max_replicas = 1;
  topo.pools.push_back(pool);  // replica 2
  topo.kv_store.capacity_bytes = std::size_t(64) << 20;
  test::config cfg;
  caf::actor_system sys{cfg};
  local_cluster c(sys, topo, loaded_models{{"", {test::small_model(), nullptr}}, {"b", {other, nullptr}}});
  BOOST_TEST_REQUIRE(bool(c.store("")));
  BOOST_TEST_REQUIRE(bool(c.store("b")));
  caf::scoped_actor self{sys};
  self->request(c.store(""), std::chrono::seconds(30), kv_subscribe_atom::value, replica_id(0), caf::actor_cast<kv_event_sink>(self))
      .receive([](const kv_snapshot&) {}, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
  BOOST_TEST(test::run_request(self, c.owner(), pair[0]) == expected_a[0]);
  for (std::size_t stored = 0; stored < 10;)
    self->receive([&](kv::kv_event_batch& b) {
                    for (auto& e : b.events)
                      if (e.kind == kv::kv_event_kind::stored) stored += e.hashes.size();
                  },
                  caf::after(std::chrono::seconds(30)) >> [&] { BOOST_FAIL("A's store stored " << stored << " blocks"); });
  auto load_of = [&](std::size_t i) {
    load_report r;
    self->request(c.schedulers()[i], std::chrono::seconds(30), load_atom::value)
        .receive([&](load_report& l) { r = l; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
    return r;
  };
  auto store_of = [&](const std::string& model) {
    store_report s;
    self->request(c.store(model), std::chrono::seconds(30), load_atom::value)
        .receive([&](store_report& x) { s = x; }, [&](caf::error& e) { BOOST_FAIL(to_string(e)); });
    return s;
  };
  // For B: the same prompt, computed whole, B's tokens.
  engine::request for_b = pair[1];
  for_b.model = "b";
  BOOST_TEST(test::run_request(self, c.owner(), for_b) == expected_b[0]);
  const load_report r2 = load_of(2);
  BOOST_TEST(r2.kv_pulls == 0u);
  BOOST_TEST(r2.prompt_tokens_computed == for_b.prompt.size());
  BOOST_TEST(store_of("").lookups == 0u);
  BOOST_TEST(store_of("b").hit_blocks == 0u);
  // For A again: the shared 160 tokens are found, wherever A's replica takes them from.
  const auto computed_a = [&] { return load_of(0).prompt_tokens_computed + load_of(1).prompt_tokens_computed; };
  const auto before = computed_a();
  engine::request for_a = pair[1];
  for_a.id += "-a";
  BOOST_TEST(test::run_request(self, c.owner(), for_a) == expected_a[1]);
  BOOST_TEST(computed_a() - before == for_a.prompt.size() - 160);
}
