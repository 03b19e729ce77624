#define BOOST_TEST_MODULE routing
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/routing/disaggregation.h"
#include "runtime/routing/policy.h"
#include "runtime/routing/prefix_index.h"

using namespace troupe::routing;
using troupe::replica_id;

namespace {
std::vector<replica_load> three() {
  return {{replica_id(0), true, 4, 0, 100, 100}, {replica_id(1), true, 1, 900, 100, 100}, {replica_id(2), true, 2, 0, 100, 100}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(round_robin_cycles_over_live_replicas_only) {
  auto r = three();
  r[1].alive = false;
  std::vector<std::size_t> picks;
  for (std::uint64_t i = 0; i < 4; ++i) picks.push_back(*round_robin({}, r, {}, i).index);
  BOOST_TEST(picks == (std::vector<std::size_t>{0, 2, 0, 2}));
  for (auto& x : r) x.alive = false;
  BOOST_TEST(!round_robin({}, r, {}, 0).index.has_value());
}

BOOST_AUTO_TEST_CASE(least_loaded_weighs_running_sequences_and_queued_prompt_tokens) {
  auto r = three();
  // Scores with defaults (1, 1/256) for a 100-token prompt: 4.39, 1 + 3.9 = 4.9, 2.39.
  BOOST_TEST(*least_loaded({1, 100, 0}, r, {}, 0).index == 2u);
  // Ignoring queued tokens makes replica 1 (one running sequence) the lightest.
  BOOST_TEST(*least_loaded({1, 100, 0}, r, {{"token_weight", 0.0}}, 0).index == 1u);
  r[2].alive = false;
  BOOST_TEST(*least_loaded({1, 100, 0}, r, {}, 0).index == 0u);
}

BOOST_AUTO_TEST_CASE(registry_holds_builtins_and_user_policies) {
  auto& g = registry::global();
  BOOST_TEST(g.has("round_robin"));
  BOOST_TEST(g.has("least_loaded"));
  g.add("always_last", [](const route_request&, std::span<const replica_load> r, const policy_params&, std::uint64_t) {
    return decision{r.size() - 1, "last"};
  });
  auto r = three();
  BOOST_TEST(*g.get("always_last")({}, r, {}, 0).index == 2u);
  BOOST_CHECK_EXCEPTION(g.get("nope"), troupe::input_error, [](const troupe::input_error& e) {
    return std::string(e.what()).find("unknown routing policy 'nope'") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(kv_aware_weighs_cached_prefix_against_load) {
  // 1,024-token prompt, 64 blocks of 16. Replica 0 holds 60 of its blocks but runs 3 sequences.
  std::vector<replica_load> r = {{replica_id(0), true, 3, 0, 100, 100}, {replica_id(1), true, 0, 0, 100, 100}};
  r[0].cached_blocks = 60;
  const route_request q{1, 1024, 0, 16};
  // cost 0: (1024 - 960) / 256 + 3 = 3.25; cost 1: 1024 / 256 = 4.
  decision d = kv_aware(q, r, {}, 0);
  BOOST_TEST(*d.index == 0u);
  BOOST_TEST(d.reason == "prefix_hit");
  // Twice the weight on running sequences: the idle replica wins and computes the prompt.
  d = kv_aware(q, r, {{"running_weight", 2.0}}, 0);
  BOOST_TEST(*d.index == 1u);
  BOOST_TEST(d.reason == "no_hit");
  // An index known to be incomplete for any live replica: load only.
  r[1].index_complete = false;
  d = kv_aware(q, r, {}, 0);
  BOOST_TEST(*d.index == 1u);
  BOOST_TEST(d.reason == "index_incomplete");
  r[1].alive = false;  // ... unless that replica cannot be chosen anyway
  BOOST_TEST(kv_aware(q, r, {}, 0).reason == "prefix_hit");
}

namespace {

troupe::kv::kv_event_batch stored(std::uint32_t replica, std::uint64_t gen, std::uint64_t seq, std::vector<troupe::kv::block_hash> hs) {
  troupe::kv::kv_event e;
  e.kind = troupe::kv::kv_event_kind::stored;
  e.hashes = std::move(hs);
  return {replica_id(replica), gen, seq, 0, {e}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(prefix_index_follows_events_and_fences_old_generations) {
  using troupe::kv::kv_event;
  using troupe::kv::kv_event_kind;
  prefix_index ix;
  // Before its snapshot a replica is incomplete, and its events are a gap.
  BOOST_TEST(!ix.complete(replica_id(0)));
  BOOST_TEST(int(ix.apply(stored(0, 5, 1, {11}))) == int(prefix_index::outcome::gap));
  ix.reset(replica_id(0), 5, 1, std::vector<troupe::kv::block_hash>{11});
  BOOST_TEST(ix.complete(replica_id(0)));
  BOOST_TEST(int(ix.apply(stored(0, 5, 1, {11}))) == int(prefix_index::outcome::stale));  // in the snapshot
  BOOST_TEST(int(ix.apply(stored(0, 5, 2, {12, 13}))) == int(prefix_index::outcome::applied));
  const std::vector<troupe::kv::block_hash> q = {11, 12, 13, 14};
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 3);
  BOOST_TEST(ix.matched_blocks(replica_id(0), std::vector<troupe::kv::block_hash>{12, 13}) == 2);
  BOOST_TEST(ix.matched_blocks(replica_id(1), q) == 0);
  kv_event removed{kv_event_kind::removed, {12}};
  BOOST_TEST(int(ix.apply({replica_id(0), 5, 3, 0, {removed}})) == int(prefix_index::outcome::applied));
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 1);
  // A missing batch: incomplete, nothing credited, until a snapshot.
  BOOST_TEST(int(ix.apply(stored(0, 5, 5, {12}))) == int(prefix_index::outcome::gap));
  BOOST_TEST(!ix.complete(replica_id(0)));
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 0);
  ix.reset(replica_id(0), 5, 5, std::vector<troupe::kv::block_hash>{11, 12});
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 2);
  // The replica restarted: its new generation starts empty; the old one's events are stale.
  BOOST_TEST(int(ix.apply(stored(0, 9, 1, {21}))) == int(prefix_index::outcome::applied));
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 0);
  BOOST_TEST(int(ix.apply(stored(0, 5, 6, {11}))) == int(prefix_index::outcome::stale));
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 0);
  // A prediction counts until an event or a reset says otherwise.
  ix.predict(replica_id(0), q);
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 4);
  kv_event cleared{kv_event_kind::cleared};
  BOOST_TEST(int(ix.apply({replica_id(0), 9, 2, 0, {cleared}})) == int(prefix_index::outcome::applied));
  BOOST_TEST(ix.matched_blocks(replica_id(0), q) == 0);
  ix.drop(replica_id(0));
  BOOST_TEST(!ix.complete(replica_id(0)));
}

// A store's blocks are a prefix hit for a replica only in the replica's own KV dtype: the router
// asks for no pull the layout check would refuse.
BOOST_AUTO_TEST_CASE(prefix_index_knows_each_sources_kv_dtype) {
  using troupe::kernels::dtype;
  prefix_index ix;
  BOOST_TEST(!ix.kv_type(replica_id(0)).has_value());
  BOOST_TEST(ix.same_kv_type(replica_id(7), replica_id(0)));  // neither known yet: the pull decides
  auto b = stored(0, 1, 1, {11});
  b.kv_type = dtype::int8;
  ix.apply(b);
  BOOST_TEST((ix.kv_type(replica_id(0)) == dtype::int8));
  BOOST_TEST(ix.same_kv_type(replica_id(7), replica_id(0)));  // the store's not known yet
  b = stored(7, 1, 1, {11});
  b.kv_type = dtype::f16;
  ix.apply(b);
  BOOST_TEST(!ix.same_kv_type(replica_id(7), replica_id(0)));
  b = stored(2, 1, 1, {11});
  b.kv_type = dtype::int8;
  ix.apply(b);
  BOOST_TEST(ix.same_kv_type(replica_id(2), replica_id(0)));
  // A replica restarted with another dtype says so in its next batch.
  b = stored(0, 2, 1, {12});
  b.kv_type = dtype::f16;
  ix.apply(b);
  BOOST_TEST(ix.same_kv_type(replica_id(7), replica_id(0)));
}

BOOST_AUTO_TEST_CASE(conditional_disaggregation_weighs_the_prefill_queue_against_the_local_prefill) {
  using troupe::routing::prefill_remotely;
  const troupe::routing::disaggregation_params p{64, 4};
  BOOST_TEST(!prefill_remotely(63, 0, p));        // too short to be worth moving its KV
  BOOST_TEST(prefill_remotely(64, 0, p));
  BOOST_TEST(prefill_remotely(1000, 4000, p));    // waits behind 4x its own work at most
  BOOST_TEST(!prefill_remotely(1000, 4001, p));   // the prefill pool is too far behind
  BOOST_TEST(prefill_remotely(1000, 1 << 30, {0, 0}));  // ratio 0: no queue limit
  BOOST_TEST(!prefill_remotely(0, 0, {0, 0}));    // all of it cached where it decodes
}
