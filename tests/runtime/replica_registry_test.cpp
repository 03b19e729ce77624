#define BOOST_TEST_MODULE replica_registry
#include <boost/test/unit_test.hpp>

#include "runtime/routing/replica_registry.h"

// The router's book of replicas without an actor: slots, drains and parks told here or reported
// by the replicas (another head's console), and the second in which a report is not adopted.
using namespace troupe::routing;
using troupe::replica_id;
using namespace std::chrono_literals;

namespace {
const replica_registry::clock::time_point t0{};
}

BOOST_AUTO_TEST_CASE(a_registration_takes_a_slot_once_and_counts_lives) {
  replica_registry book;
  const auto a = book.enroll(replica_id(3));
  const auto b = book.enroll(replica_id(5));
  BOOST_TEST(a != b);
  book.down(a);
  BOOST_TEST(!book.loads()[a].alive);
  BOOST_TEST(book.enroll(replica_id(3)) == a);  // a restart keeps its slot
  BOOST_TEST(book.loads()[a].alive);
  BOOST_TEST(book.generation(replica_id(3)) == 2u);
  BOOST_TEST(book.generation(replica_id(9)) == 0u);
  BOOST_TEST(book.placeable() == 2u);
}

BOOST_AUTO_TEST_CASE(drained_and_parked_replicas_are_held_back) {
  replica_registry book({7});
  book.enroll(replica_id(1));
  book.enroll(replica_id(7));
  BOOST_TEST(book.held_back(replica_id(7)));  // warm at start
  BOOST_TEST(book.placeable() == 1u);
  book.drain(replica_id(1), t0);
  BOOST_TEST(book.held_back(replica_id(1)));
  BOOST_TEST(book.placeable() == 0u);
  BOOST_TEST(book.resume(replica_id(7), t0));   // was parked
  BOOST_TEST(!book.resume(replica_id(7), t0));  // not twice
  BOOST_TEST(book.park(replica_id(1), t0));     // parking ends a drain
  BOOST_TEST(!book.draining(replica_id(1)));
  BOOST_TEST(book.parked(replica_id(1)));
}

BOOST_AUTO_TEST_CASE(another_heads_drain_and_park_arrive_by_report_but_not_over_a_fresh_order) {
  replica_registry book;
  const auto s = book.enroll(replica_id(2));
  replica_report rep{4, 100, 30, 64, true, false};
  BOOST_TEST(!book.report(replica_id(2), rep, t0));
  BOOST_TEST(book.draining(replica_id(2)));  // another head drained it
  BOOST_TEST(book.loads()[s].running_seqs == 4);
  BOOST_TEST(book.loads()[s].free_blocks == 34);
  book.resume(replica_id(2), t0 + 10s);  // told here: a report still in flight predates it
  rep.parked = true;
  BOOST_TEST(!book.report(replica_id(2), rep, t0 + 10s + 500ms));
  BOOST_TEST(!book.draining(replica_id(2)));
  BOOST_TEST(!book.parked(replica_id(2)));
  BOOST_TEST(book.report(replica_id(2), rep, t0 + 12s).value());  // later: adopted, and said so
  BOOST_TEST(book.parked(replica_id(2)));
  BOOST_TEST(book.draining(replica_id(2)));
}

BOOST_AUTO_TEST_CASE(progress_lowers_the_figures_until_the_next_report) {
  replica_registry book;
  const auto s = book.enroll(replica_id(1));
  book.report(replica_id(1), {2, 50, 0, 10, false, false}, t0);
  book.progress(replica_id(1), 80, true);
  BOOST_TEST(book.loads()[s].waiting_prompt_tokens == 0);
  BOOST_TEST(book.loads()[s].running_seqs == 1);
}

BOOST_AUTO_TEST_CASE(a_retired_replica_is_stopped_not_dead) {
  replica_registry book;
  BOOST_TEST(!book.retire(replica_id(4)));  // never registered
  const auto s = book.enroll(replica_id(4));
  book.drain(replica_id(4), t0);
  BOOST_TEST(book.retire(replica_id(4)).value() == s);
  BOOST_TEST(book.stopped(replica_id(4)));
  BOOST_TEST(!book.draining(replica_id(4)));
  BOOST_TEST(book.placeable() == 0u);
  book.enroll(replica_id(4));  // scaled up again
  BOOST_TEST(!book.stopped(replica_id(4)));
}

// The failure detector's first stage: a replica silent past the threshold is suspect (once, not
// at every look), trusted again when heard from, and forgotten when it dies or is retired. A
// registration counts as being heard from.
BOOST_AUTO_TEST_CASE(a_silent_replica_is_suspect_until_it_is_heard_from_again) {
  replica_registry book;
  book.enroll(replica_id(1));
  book.enroll(replica_id(2));
  book.heard(replica_id(1), t0);
  book.heard(replica_id(2), t0);
  BOOST_TEST(book.judge(t0 + 3s, 3s).empty());  // exactly the threshold: not yet
  book.heard(replica_id(2), t0 + 2s);
  const auto changed = book.judge(t0 + 4s, 3s);
  BOOST_TEST_REQUIRE(changed.size() == 1u);
  BOOST_TEST(changed[0].first == replica_id(1));
  BOOST_TEST(changed[0].second);
  BOOST_TEST(book.suspect(replica_id(1)));
  BOOST_TEST(!book.suspect(replica_id(2)));
  BOOST_TEST(book.any_suspect());
  BOOST_TEST(book.loads()[0].alive);         // suspect is not dead: its requests stay
  BOOST_TEST(book.judge(t0 + 5500ms, 3s).size() == 1u);  // now 2 as well
  BOOST_TEST(book.judge(t0 + 6s, 3s).empty());       // reported once
  book.heard(replica_id(1), t0 + 7s);
  const auto back = book.judge(t0 + 7s, 3s);
  BOOST_TEST_REQUIRE(back.size() == 1u);
  BOOST_TEST((back[0].first == replica_id(1) && !back[0].second));
  book.down(*book.slot(replica_id(2)));
  BOOST_TEST(!book.suspect(replica_id(2)));
  BOOST_TEST(book.judge(t0 + 60s, 3s).size() == 1u);  // the dead one is not judged; 1 is silent again
  book.enroll(replica_id(1));
  BOOST_TEST(!book.suspect(replica_id(1)));  // a new life starts trusted
}
