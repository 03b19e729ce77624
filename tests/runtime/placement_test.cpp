#define BOOST_TEST_MODULE placement
#include <boost/test/unit_test.hpp>

#include <set>

#include "runtime/routing/placement.h"

// routing::place without actors: the decisions router_actor's route handler makes, one by one.
using namespace troupe::routing;
using troupe::replica_id;
namespace kv = troupe::kv;

namespace {

// Three replicas: 0 busy, 1 idle, 2 in between (least_loaded picks 1).
struct world {
  std::vector<replica_load> loads{{replica_id(0), true, 5, 0, 100, 100}, {replica_id(1), true, 0, 0, 100, 100},
                                  {replica_id(2), true, 2, 0, 100, 100}};
  std::map<replica_id, replica_role> roles;
  std::set<replica_id> held;
  prefix_index index;
  policy choose = least_loaded;
  policy_params params;
  std::vector<replica_id> stores;

  placement_context context() {
    placement_context c;
    c.loads = loads;
    c.roles = &roles;
    c.held_back = [this](replica_id r) { return held.count(r) > 0; };
    c.any_held_back = !held.empty();
    c.index = &index;
    c.stores = stores;
    c.choose = &choose;
    c.params = &params;
    c.block_size = 4;
    return c;
  }
};

kv::kv_event_batch holding(std::uint32_t replica, std::vector<kv::block_hash> hashes, troupe::kernels::dtype t) {
  kv::kv_event e;
  e.kind = kv::kv_event_kind::stored;
  e.hashes = std::move(hashes);
  kv::kv_event_batch b{replica_id(replica), 1, 1, 0, {e}};
  b.kv_type = t;
  return b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_policy_chooses_among_replicas_not_left_and_not_held_back) {
  world w;
  BOOST_TEST(*place(w.context(), {10, 0, replica_id(99), false, {}}).slot == 1u);
  // Leaving replica 1: it is not chosen back.
  BOOST_TEST(*place(w.context(), {10, 0, replica_id(1), false, {}}).slot == 2u);
  // Draining or parked: placed on by nobody.
  w.held = {replica_id(1), replica_id(2)};
  BOOST_TEST(*place(w.context(), {10, 0, replica_id(99), false, {}}).slot == 0u);
  w.held.insert(replica_id(0));
  const placement none = place(w.context(), {10, 0, replica_id(99), false, {}});
  BOOST_TEST(!none.slot.has_value());
  BOOST_TEST(!none.why.empty());  // the policy says why nothing could take it
}

BOOST_AUTO_TEST_CASE(a_long_prompt_goes_to_an_idle_prefill_pool_and_a_handed_off_one_never_does) {
  world w;
  w.roles = {{replica_id(1), replica_role::prefill}};
  auto c = w.context();
  c.disaggregation = {64, 0};
  const placement p = place(c, {100, 0, replica_id(99), false, {}});
  BOOST_TEST(p.prefill_only);
  BOOST_TEST(*p.slot == 1u);
  // Short prompts stay where they decode, and so does a request handed off after its prefill.
  const placement s = place(c, {10, 0, replica_id(99), false, {}});
  BOOST_TEST(!s.prefill_only);
  BOOST_TEST(*s.slot == 2u);  // the prefill replica is no decode replica
  const placement d = place(c, {100, 0, replica_id(99), true, {}});
  BOOST_TEST(!d.prefill_only);
  BOOST_TEST(*d.slot == 2u);
}

BOOST_AUTO_TEST_CASE(a_store_is_named_when_it_holds_more_of_the_prefix_in_the_replicas_dtype) {
  using troupe::kernels::dtype;
  world w;
  const std::vector<kv::block_hash> prefix{11, 12, 13};
  w.index.reset(replica_id(1), 1, 0, {});
  w.index.apply(holding(1, {}, dtype::f16));
  w.index.reset(replica_id(7), 1, 0, {});
  w.index.apply(holding(7, {11, 12}, dtype::f16));
  w.index.reset(replica_id(8), 1, 0, {});
  w.index.apply(holding(8, {11, 12, 13}, dtype::int8));
  w.stores = {replica_id(7), replica_id(8)};
  placement p = place(w.context(), {12, 0, replica_id(99), false, prefix});
  BOOST_TEST(*p.slot == 1u);
  // Store 8 holds all three blocks but in int8: replica 1's f16 cache cannot take them.
  BOOST_TEST((p.store == replica_id(7)));
  BOOST_TEST(p.store_blocks == 2);
  // A handed-off request has its KV already: no store.
  BOOST_TEST(!place(w.context(), {12, 0, replica_id(99), true, prefix}).store.has_value());
}

BOOST_AUTO_TEST_CASE(a_kv_aware_placement_counts_what_the_replica_holds) {
  using troupe::kernels::dtype;
  world w;
  w.choose = kv_aware;
  w.params = {{"running_weight", 0.0}};  // by prompt tokens left to compute only
  w.index.reset(replica_id(0), 1, 0, std::vector<kv::block_hash>{21, 22});
  w.index.reset(replica_id(1), 1, 0, {});
  w.index.reset(replica_id(2), 1, 0, {});
  auto c = w.context();
  c.kv_aware = true;
  const placement p = place(c, {12, 0, replica_id(99), false, {21, 22}});
  BOOST_TEST(*p.slot == 0u);  // it holds two of the prompt's blocks
  BOOST_TEST(p.cached_tokens == 8);
  count_placement(w.loads[0], 12, p.cached_tokens);
  BOOST_TEST(w.loads[0].running_seqs == 6);
  BOOST_TEST(w.loads[0].waiting_prompt_tokens == 4);
}

BOOST_AUTO_TEST_CASE(a_prompts_hashes_leave_out_a_full_last_block) {
  const auto root = kv::root_hash("m");
  BOOST_TEST(prompt_block_hashes({1, 2, 3, 4, 5, 6, 7, 8}, 4, root, "", 0).size() == 1u);  // its last token is computed
  BOOST_TEST(prompt_block_hashes({1, 2, 3, 4, 5, 6, 7, 8, 9}, 4, root, "", 0).size() == 2u);
  BOOST_TEST(prompt_block_hashes({1, 2, 3, 4, 5}, 4, root, "a", 0) != prompt_block_hashes({1, 2, 3, 4, 5}, 4, root, "b", 0));
}

// Several models (issue 29): a request goes only to a replica of its model, and is pointed only
// at its model's store, however much less loaded another model's replica is or however much of
// the prefix another model's store holds.
BOOST_AUTO_TEST_CASE(a_request_goes_only_to_its_models_replicas_and_stores) {
  using troupe::kernels::dtype;
  world w;
  const std::map<replica_id, std::string> models{{replica_id(1), "draft"}, {replica_id(2), "draft"}, {replica_id(8), "draft"}};
  const std::vector<kv::block_hash> prefix{11, 12, 13};
  for (std::uint32_t r : {0u, 1u, 2u}) {
    w.index.reset(replica_id(r), 1, 0, {});
    w.index.apply(holding(r, {}, dtype::f32));
  }
  w.index.reset(replica_id(7), 1, 0, {});
  w.index.apply(holding(7, {11, 12, 13}, dtype::f32));  // [model]'s store
  w.index.reset(replica_id(8), 1, 0, {});
  w.index.apply(holding(8, {11}, dtype::f32));  // draft's
  w.stores = {replica_id(7), replica_id(8)};
  auto c = w.context();
  c.models = &models;
  placement_query q{10, 0, replica_id(99), false, prefix};
  const placement base = place(c, q);
  BOOST_TEST(*base.slot == 0u);  // the busiest replica, but the only one of [model]
  BOOST_TEST((base.store == replica_id(7)));
  q.model = "draft";
  const placement draft = place(c, q);
  BOOST_TEST(*draft.slot == 1u);
  BOOST_TEST((draft.store == replica_id(8)));  // store 7 holds more, of another model
  BOOST_TEST(draft.store_blocks == 1);
  q.model = "other";
  BOOST_TEST(!place(c, q).slot.has_value());  // no replica serves it
  // Draft's replicas draining: nothing of [model] is taken instead.
  w.held = {replica_id(1), replica_id(2)};
  auto held = w.context();
  held.models = &models;
  q.model = "draft";
  BOOST_TEST(!place(held, q).slot.has_value());
}

BOOST_AUTO_TEST_CASE(a_sender_keeps_its_side_of_a_canary_split_and_the_shares_hold) {
  BOOST_TEST(!canary_side("alice", 0.0));
  BOOST_TEST(canary_side("alice", 1.0));
  int on_canary = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string sender = "user-" + std::to_string(i);
    const bool at_tenth = canary_side(sender, 0.1);
    on_canary += at_tenth;
    BOOST_TEST(at_tenth == canary_side(sender, 0.1));   // the same side every time
    if (at_tenth) BOOST_TEST(canary_side(sender, 0.5)); // a growing share never moves one back
  }
  BOOST_TEST(on_canary > 1800);
  BOOST_TEST(on_canary < 2200);
}

BOOST_AUTO_TEST_CASE(a_split_places_each_side_on_its_revision_and_never_refuses) {
  world w;  // replicas 0 and 1 run the baseline "a", replica 2 the canary "b"
  const std::map<replica_id, std::string> revisions{{replica_id(0), "a"}, {replica_id(1), "a"}, {replica_id(2), "b"}};
  const canary_split split{"b", 0.25};
  auto with_split = [&] {
    auto c = w.context();
    c.revisions = &revisions;
    c.split = &split;
    return c;
  };
  placement_query to_canary{10, 0, replica_id(99), false, {}};
  to_canary.canary = true;
  placement_query to_baseline = to_canary;
  to_baseline.canary = false;
  BOOST_TEST(*place(with_split(), to_canary).slot == 2u);
  BOOST_TEST(*place(with_split(), to_baseline).slot == 1u);
  w.loads[1].running_seqs = 9;  // now the other baseline replica, never the idler canary
  BOOST_TEST(*place(with_split(), to_baseline).slot == 0u);
  // The canary draining: its side goes to the baseline rather than being refused.
  w.held = {replica_id(2)};
  BOOST_TEST(*place(with_split(), to_canary).slot == 0u);
}
