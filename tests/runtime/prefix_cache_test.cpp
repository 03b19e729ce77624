// Prefix caching must not change what a request generates: with and without hits (greedy and
// seeded), a hit followed by a chunked prefill, hits after preemption, and hits on KV that came
// in a disaggregated handoff; every block is free with a zero count at the end, and no tenant
// reuses another's blocks unless the prefix is public.
#define BOOST_TEST_MODULE prefix_cache
#include <boost/test/unit_test.hpp>

#include "runtime/engine/engine.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

using test::small_model;
using outputs = std::vector<std::vector<std::int32_t>>;

// `n` requests that share the first `shared` prompt tokens (a system prompt), then differ.
std::vector<engine::request> shared_prefix_requests(int n, int shared, bool greedy) {
  const int vocab = small_model()->config().vocab_size;
  auto reqs = test::mixed_requests(n, vocab, greedy, 60);
  for (auto& r : reqs) {
    std::vector<std::int32_t> p;
    for (int i = 0; i < shared; ++i) p.push_back((i * 4513 + 11) % vocab);
    p.insert(p.end(), r.prompt.begin(), r.prompt.end());
    r.prompt = std::move(p);
  }
  return reqs;
}

engine::engine_config with_caching(engine::engine_config c, bool on) {
  c.prefix_caching = on;
  return c;
}

void all_blocks_free(const engine::engine& e) {
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
  BOOST_TEST(int(e.blocks().free_list().size()) == e.blocks().num_blocks());
  for (int b = 0; b < e.blocks().num_blocks(); ++b) BOOST_TEST_REQUIRE(e.blocks().ref_count(kv::block_id(b)) == 0);
}

// Each request alone on a fresh engine with caching off: the reference.
outputs reference(const std::vector<engine::request>& reqs) {
  outputs out;
  for (auto& r : reqs) {
    auto e = engine::cpu_engine(small_model(), nullptr, with_caching(test::engine_cfg(512, 2048), false));
    out.push_back(engine::generate_all(e, {r})[0]);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hits_give_the_same_tokens_one_after_another_and_in_a_batch) {
  for (bool greedy : {true, false}) {
    const auto reqs = shared_prefix_requests(10, 70, greedy);
    const outputs ref = reference(reqs);
    // One after another on one engine: every request after the first hits the 64 cached tokens.
    auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
    outputs seq;
    for (auto& r : reqs) seq.push_back(engine::generate_all(e, {r})[0]);
    BOOST_TEST(e.kv().stats().hits >= 9u * 64u);
    BOOST_TEST(e.kv().stats().queries >= e.kv().stats().hits);
    BOOST_TEST(e.stats().prompt_tokens_computed < e.kv().stats().queries);
    all_blocks_free(e);
    // All at once, chunked at 16: later admissions hit what the first ones cached, in the
    // middle of their own chunked prefills.
    auto b = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(16, 64));
    const outputs batched = engine::generate_all(b, reqs);
    all_blocks_free(b);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      BOOST_TEST(seq[i] == ref[i], (greedy ? "greedy" : "seeded") << " one by one, request " << i);
      BOOST_TEST(batched[i] == ref[i], (greedy ? "greedy" : "seeded") << " batched, request " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_hit_then_a_chunked_prefill_of_the_rest) {
  auto reqs = shared_prefix_requests(2, 96, true);
  reqs[1].prompt.resize(96);  // the second is the first's prefix ...
  for (int i = 0; i < 150; ++i) reqs[1].prompt.push_back((i * 31 + 5) % small_model()->config().vocab_size);  // ... + 150
  const outputs ref = reference(reqs);
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(32, 64));
  BOOST_TEST(engine::generate_all(e, {reqs[0]})[0] == ref[0]);
  const auto before = e.kv().stats().hits;
  const auto computed = e.stats().prompt_tokens_computed;
  BOOST_TEST(engine::generate_all(e, {reqs[1]})[0] == ref[1]);
  BOOST_TEST(e.kv().stats().hits - before == 96u);  // 6 blocks of 16
  BOOST_TEST(e.stats().prompt_tokens_computed - computed == 150u);
  all_blocks_free(e);
}

BOOST_AUTO_TEST_CASE(preempted_sequences_recompute_through_the_cache) {
  for (bool greedy : {true, false}) {
    const auto reqs = shared_prefix_requests(16, 48, greedy);
    const outputs ref = reference(reqs);
    // 30 blocks cannot hold 16 requests of up to 130 tokens: preemption must happen.
    auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(64, 256, 30));
    const outputs got = engine::generate_all(e, reqs);
    BOOST_TEST(e.stats().preemptions > 0u);
    BOOST_TEST(e.kv().stats().hits > 0u);
    all_blocks_free(e);
    for (std::size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(got[i] == ref[i], (greedy ? "greedy" : "seeded") << " request " << i);
  }
}

BOOST_AUTO_TEST_CASE(handed_off_kv_is_cached_on_the_decode_side) {
  const auto reqs = shared_prefix_requests(4, 64, true);
  const outputs ref = reference(reqs);
  auto p = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  auto d = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  // The first request is prefilled on P and decoded on D with P's KV.
  auto first = reqs[0];
  first.prefill_only = true;
  p.add_request(first);
  std::vector<std::int32_t> got0;
  d.on_transfer([&](const engine::transfer_record& rec) { p.release_handoff(rec.id); });
  while (p.has_unfinished())
    for (auto& o : p.step()) {
      got0 = o.new_tokens;
      auto next = reqs[0];
      next.generated = got0;
      next.kv_from = o.kv;
      d.add_request(next);
    }
  while (d.has_unfinished())
    for (auto& o : d.step()) got0.insert(got0.end(), o.new_tokens.begin(), o.new_tokens.end());
  BOOST_TEST(got0 == ref[0]);
  BOOST_TEST(d.stats().prompt_tokens_computed == 0u);
  // The others run on D alone: their shared 64 tokens are found in the imported blocks.
  for (std::size_t i = 1; i < reqs.size(); ++i) BOOST_TEST(engine::generate_all(d, {reqs[i]})[0] == ref[i], "request " << i);
  BOOST_TEST(d.kv().stats().hits == 3u * 64u);
  all_blocks_free(p);
  all_blocks_free(d);
}

BOOST_AUTO_TEST_CASE(no_hit_across_tenants_unless_the_prefix_is_public) {
  auto reqs = shared_prefix_requests(3, 64, true);
  const outputs ref = reference(reqs);
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  reqs[0].cache_salt = "alice";
  reqs[1].cache_salt = "bob";
  reqs[2].cache_salt = "alice";
  BOOST_TEST(engine::generate_all(e, {reqs[0]})[0] == ref[0]);
  BOOST_TEST(engine::generate_all(e, {reqs[1]})[0] == ref[1]);
  BOOST_TEST(e.kv().stats().hits == 0u);  // bob found nothing of alice's
  BOOST_TEST(engine::generate_all(e, {reqs[2]})[0] == ref[2]);
  BOOST_TEST(e.kv().stats().hits == 64u);  // alice found her own
  // With the first 64 tokens public, carol reuses them whoever computed them.
  auto pub = reqs;
  for (auto& r : pub) r.public_prefix = 64;
  pub[0].id = "pub-0";
  pub[1].id = "pub-1";
  pub[1].cache_salt = "carol";
  BOOST_TEST(engine::generate_all(e, {pub[0]})[0] == ref[0]);
  const auto before = e.kv().stats().hits;
  BOOST_TEST(engine::generate_all(e, {pub[1]})[0] == ref[1]);
  BOOST_TEST(e.kv().stats().hits - before == 64u);
  all_blocks_free(e);
}

BOOST_AUTO_TEST_CASE(a_request_waits_for_a_prefix_another_is_computing_instead_of_computing_it_twice) {
  // Two requests with the same 96-token prefix arrive together; prefills go 32 tokens a step.
  // The second sits out while the first computes the prefix, then finds all of it cached.
  const auto reqs = shared_prefix_requests(2, 96, true);
  const outputs ref = reference(reqs);
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(32, 256));
  const outputs got = engine::generate_all(e, reqs);
  BOOST_TEST(got[0] == ref[0]);
  BOOST_TEST(got[1] == ref[1]);
  BOOST_TEST(e.stats().prefix_waits > 0u);
  BOOST_TEST(e.kv().stats().hits == 96u);
  all_blocks_free(e);
}

BOOST_AUTO_TEST_CASE(queued_prompt_work_leaves_out_what_the_cache_holds) {
  // What a replica reports as queued prefill (the router weighs it) is what it will compute.
  const auto reqs = shared_prefix_requests(2, 64, true);
  auto e = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(512, 2048));
  engine::generate_all(e, {reqs[0]});
  auto second = reqs[1];
  e.add_request(second);
  BOOST_TEST(e.waiting_prompt_tokens() == second.prompt.size() - 64);
  while (e.has_unfinished()) e.step();
  all_blocks_free(e);
}
