// A replica's KV event stream: batches numbered within a generation, a new generation at a
// cache reset, nothing numbered while nobody follows, and subscribers added once and dropped.
#define BOOST_TEST_MODULE event_stream
#include <boost/test/unit_test.hpp>

#include "runtime/kv/event_stream.h"

using namespace troupe;
using namespace troupe::kv;

namespace {

kv_event stored(block_hash h) {
  kv_event e;
  e.kind = kv_event_kind::stored;
  e.hashes = {h};
  return e;
}

kv_event cleared() {
  kv_event e;
  e.kind = kv_event_kind::cleared;
  return e;
}

}  // namespace

BOOST_AUTO_TEST_CASE(batches_are_numbered_and_a_reset_starts_a_generation) {
  event_stream<int> s(100);
  BOOST_TEST(s.subscribe(replica_id{3}, 7));
  auto b = s.batches({stored(1), stored(2)}, 5.0, kernels::dtype::f16);
  BOOST_TEST_REQUIRE(b.size() == 1u);
  BOOST_TEST(b[0].replica.value == 3u);
  BOOST_TEST(b[0].generation == 100u);
  BOOST_TEST(b[0].seq == 1u);
  BOOST_TEST(b[0].events.size() == 2u);
  BOOST_TEST((b[0].kv_type == kernels::dtype::f16));

  b = s.batches({stored(3), cleared(), stored(4)}, 6.0, kernels::dtype::f16);
  BOOST_TEST_REQUIRE(b.size() == 2u);
  BOOST_TEST(b[0].generation == 100u);
  BOOST_TEST(b[0].seq == 2u);
  BOOST_TEST(b[1].generation == 101u);  // the all-cleared event opens the new generation
  BOOST_TEST(b[1].seq == 1u);
  BOOST_TEST((b[1].events[0].kind == kv_event_kind::cleared));
  BOOST_TEST(s.generation() == 101u);
  BOOST_TEST(s.seq() == 1u);
}

BOOST_AUTO_TEST_CASE(nobody_following_numbers_nothing) {
  event_stream<int> s(1);
  BOOST_TEST(s.batches({stored(1), cleared()}, 0, kernels::dtype::f32).empty());
  BOOST_TEST(s.generation() == 1u);
  BOOST_TEST(s.seq() == 0u);
  s.subscribe(replica_id{0}, 1);
  BOOST_TEST(s.batches({}, 0, kernels::dtype::f32).empty());
}

BOOST_AUTO_TEST_CASE(a_subscriber_is_added_once_and_dropped) {
  event_stream<int> s;
  BOOST_TEST(s.subscribe(replica_id{1}, 4));
  BOOST_TEST(!s.subscribe(replica_id{1}, 4));
  BOOST_TEST(s.subscribe(replica_id{1}, 5));
  BOOST_TEST(s.sinks().size() == 2u);
  BOOST_TEST(s.drop_if([](int x) { return x == 4; }) == 1u);
  BOOST_TEST(s.drop_if([](int x) { return x == 4; }) == 0u);
  BOOST_TEST(s.sinks().size() == 1u);
}
