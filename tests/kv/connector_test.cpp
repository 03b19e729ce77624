#define BOOST_TEST_MODULE kv_connector
#include <boost/test/unit_test.hpp>

#include "runtime/kv/connector.h"

// The KV connector without actors: the decisions the scheduler actors, the engine and the request
// owner carry out for a handoff, a KV-store hit and a drain with live KV, failure paths first.
// Peers are numbers here (actor handles in the actors).
using namespace troupe::kv::connector;
namespace transfer = troupe::kv::transfer;

namespace {

constexpr int prefill = 1, decode = 2, store = 9;  // holders, by number

transfer::kv_handle handle(int blocks, int block_size = 16) {
  transfer::kv_handle h;
  h.request = "r";
  for (int b = 0; b < blocks; ++b) h.blocks.push_back(100 + b);
  h.positions = blocks * block_size;
  return h;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(handoff)

BOOST_AUTO_TEST_CASE(pulled_kv_is_freed_once_at_the_sender) {
  scheduler_side<int> sender, receiver;
  const auto h = sender.handed_off("r", true);
  BOOST_TEST(h.what == h.hold);
  receiver.expect("r", prefill);
  BOOST_TEST(receiver.holder_of("r").value() == prefill);
  const auto c = sender.claimed("r");  // the receiver's claim before it pulls: a fresh hold
  BOOST_TEST(c.held);
  BOOST_TEST(!c.ask);
  BOOST_TEST(c.timer.value() != h.timer);
  BOOST_TEST(!sender.expired("r", h.timer));  // the first hold's timer is superseded by the claim

  incoming in(handle(3));
  in.start(7);
  std::string error;
  BOOST_TEST((in.end(7, error, failure_policy::retry) == after_pull::compute_on));
  BOOST_TEST(!in.expected());
  BOOST_TEST(receiver.pulled("r").value() == prefill);
  BOOST_TEST(!receiver.pulled("r"));  // told once
  const auto rel = sender.released("r");
  BOOST_TEST(rel.free_blocks);
  BOOST_TEST(!rel.tell);
  BOOST_TEST(!sender.expired("r", *c.timer));  // released: the later timer frees nothing twice
  BOOST_TEST(!sender.released("r").free_blocks);
}

BOOST_AUTO_TEST_CASE(a_handoff_nobody_receives_is_freed_at_once) {
  scheduler_side<int> sender;
  BOOST_TEST(sender.handed_off("r", false).what == scheduler_side<int>::handoff::free_now);
  BOOST_TEST(!sender.claimed("r").held);
}

BOOST_AUTO_TEST_CASE(a_stale_completion_changes_nothing) {
  incoming in(handle(2));
  in.start(3);
  std::string error;
  BOOST_TEST((in.end(2, error, failure_policy::recompute) == after_pull::stale));
  BOOST_TEST(in.in_flight());
  BOOST_TEST(in.expected());
}

BOOST_AUTO_TEST_CASE(what_the_receiver_caches_is_not_pulled_again) {
  incoming in(handle(4));
  BOOST_TEST(!in.trim(1, 16));
  BOOST_TEST(in.skip() == 1);
  BOOST_TEST(in.positions() == 48);
  BOOST_TEST(in.handle().blocks.front() == 101);
  BOOST_TEST(in.trim(3, 48));  // the rest was cached too: nothing to pull, the holder may free
  BOOST_TEST(!in.expected());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(failures)

// The prefill replica is killed while its KV is copied: the pull fails. The policy decides, and
// the holder (dead, or alive and told) is released either way.
BOOST_AUTO_TEST_CASE(prefill_killed_mid_transfer) {
  for (auto policy : {failure_policy::retry, failure_policy::recompute}) {
    scheduler_side<int> receiver;
    receiver.expect("r", prefill);
    incoming in(handle(3));
    in.start(1);
    std::string error = "connection reset by peer";
    const after_pull next = in.end(1, error, policy);
    BOOST_TEST((next == (policy == failure_policy::retry ? after_pull::retry_elsewhere : after_pull::recompute_here)));
    BOOST_TEST(error == "connection reset by peer");
    BOOST_TEST(!in.expected());  // spent: a retry recomputes, it never pulls the dead holder again
    BOOST_TEST(receiver.pulled("r").value() == prefill);
  }
}

// The decode pool is full: the handed-off request waits for blocks longer than the hold. The
// sender frees its blocks when the hold expires, the late claim is refused, and the pull that
// follows fails into the policy.
BOOST_AUTO_TEST_CASE(decode_pool_full_until_the_hold_expired) {
  scheduler_side<int> sender, receiver;
  const auto h = sender.handed_off("r", true);
  receiver.expect("r", prefill);
  incoming in(handle(2));
  BOOST_TEST(in.expected());
  BOOST_TEST(!in.in_flight());  // not admitted: no blocks reserved yet
  BOOST_TEST(sender.expired("r", h.timer));  // nobody pulled in time: free the blocks
  const auto late = sender.claimed("r");
  BOOST_TEST(!late.held);
  BOOST_TEST(!late.timer);
  in.start(1);  // admitted at last; the refused claim fails its pull
  std::string error = "the holder no longer holds it";
  BOOST_TEST((in.end(1, error, failure_policy::retry) == after_pull::retry_elsewhere));
  BOOST_TEST(receiver.pulled("r").value() == prefill);
  BOOST_TEST(!sender.released("r").free_blocks);  // expired already: nothing freed twice
}

// A hold expires while the request is relayed by a drained replica: the relay's timer frees
// nothing (the first holder's own hold does), and the claim goes to that holder.
BOOST_AUTO_TEST_CASE(holder_expired_behind_a_relay) {
  scheduler_side<int> first, drained;
  const auto held = first.handed_off("r", true);
  drained.expect("r", prefill);
  incoming in(handle(2));
  const auto passed = in.pass_on();  // the drained replica hands it on before pulling
  BOOST_TEST(passed.blocks.size() == 2u);
  BOOST_TEST(!in.expected());
  const auto relay = drained.handed_off("r", true);
  BOOST_TEST(relay.what == relay.hold);
  BOOST_TEST(drained.num_relayed() == 1u);
  BOOST_TEST(!drained.holder_of("r"));  // it no longer pulls: it stands in for the holder
  const auto c = drained.claimed("r");  // the next receiver's claim is asked of the first holder
  BOOST_TEST(c.ask.value() == prefill);
  BOOST_TEST(first.expired("r", held.timer));  // ... whose own hold ran out meanwhile
  BOOST_TEST(!first.claimed("r").held);       // so the claim the relay passes on is refused
  BOOST_TEST(!drained.expired("r", *c.timer));  // the relay's expiry frees nothing here
  BOOST_TEST(drained.num_relayed() == 0u);
}

BOOST_AUTO_TEST_CASE(a_relay_passes_the_release_on) {
  scheduler_side<int> drained;
  drained.expect("r", prefill);
  drained.handed_off("r", true);
  const auto rel = drained.released("r");
  BOOST_TEST(!rel.free_blocks);
  BOOST_TEST(rel.tell.value() == prefill);
  BOOST_TEST(drained.num_relayed() == 0u);
}

BOOST_AUTO_TEST_CASE(a_relay_nobody_receives_keeps_its_holder_for_the_end) {
  scheduler_side<int> drained;
  drained.expect("r", prefill);
  BOOST_TEST(drained.handed_off("r", false).what == scheduler_side<int>::handoff::nothing);
  BOOST_TEST(drained.pulled("r").value() == prefill);  // the request's end releases it
}

// The router announced a store hit but the store's blocks went before the lookup: the owner
// gets an empty handle and the request is computed as usual, with nobody to release.
BOOST_AUTO_TEST_CASE(store_miss_after_a_hit_was_announced) {
  lease<int, int> owner;
  const transfer::kv_handle found;  // the lookup's answer
  if (!found.empty()) owner.grant(found, store, 0);
  auto [kv, holder] = owner.take();
  BOOST_TEST(kv.empty());
  BOOST_TEST(!holder);
  incoming in(std::move(kv));
  BOOST_TEST(!in.expected());
  BOOST_TEST(!in.trim(2, 32));
  scheduler_side<int> receiver;
  BOOST_TEST(!receiver.holder_of("r"));  // no claim: nothing pulled
  BOOST_TEST(!receiver.pulled("r"));
}

// A store hit whose blocks the store let go of between the lookup and the pull (its hold ran
// out): the claim is refused and the pull fails into the policy like any other.
BOOST_AUTO_TEST_CASE(store_hit_gone_before_the_pull) {
  scheduler_side<int> receiver;
  receiver.expect("r", store);
  incoming in(handle(2));
  in.start(4);
  std::string error = "the KV store no longer holds it";
  BOOST_TEST((in.end(4, error, failure_policy::recompute) == after_pull::recompute_here));
  BOOST_TEST(receiver.pulled("r").value() == store);
}

// This replica's own KV is lost while a pull writes into it: the pull counts as failed and the
// request is recomputed here even under the retry policy (the sender did nothing wrong).
BOOST_AUTO_TEST_CASE(receiver_kv_lost_while_pulling) {
  incoming in(handle(2));
  BOOST_TEST(!in.lose());  // not pulling: nothing to note
  in.start(1);
  BOOST_TEST(in.lose());
  std::string error;
  BOOST_TEST((in.end(1, error, failure_policy::retry) == after_pull::recompute_here));
  BOOST_TEST(!error.empty());
}

BOOST_AUTO_TEST_CASE(aborted_while_pulling_ends_when_the_copy_does) {
  incoming in(handle(2));
  BOOST_TEST(!in.abort_when_pulled());  // not pulling: ends at once
  in.start(1);
  BOOST_TEST(in.abort_when_pulled());
  BOOST_TEST(in.pass_on().empty());  // a copy in flight is never handed on
  std::string error = "timed out";
  BOOST_TEST((in.end(1, error, failure_policy::retry) == after_pull::abort));
}

BOOST_AUTO_TEST_CASE(a_lease_goes_to_one_receiver) {
  lease<int, int> owner;
  owner.grant(handle(2), prefill, 5);
  BOOST_TEST(owner.held());
  auto [kv, holder] = owner.take();
  BOOST_TEST(kv.blocks.size() == 2u);
  BOOST_TEST(holder.value() == prefill);
  BOOST_TEST(!owner.held());
  BOOST_TEST(!owner.drop());  // a later move recomputes: nothing to release twice
  BOOST_TEST(owner.from() == 5);  // a retry still avoids the replica that computed it
  owner.grant(handle(1), decode, 6);
  BOOST_TEST(owner.drop().value() == decode);  // the request ended before anyone pulled
}

BOOST_AUTO_TEST_SUITE_END()
