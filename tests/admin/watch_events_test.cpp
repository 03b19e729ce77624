// The serving actors' events as `watch` prints them: replicas by the names the console uses,
// and a replica the admin view does not know yet by its number rather than a wrong name.
#define BOOST_TEST_MODULE watch_events
#include <boost/test/unit_test.hpp>

#include "runtime/admin/watch_events.h"

using namespace troupe;
using namespace troupe::admin;

namespace {

std::vector<replica_status> named(std::initializer_list<const char*> names) {
  std::vector<replica_status> out;
  for (const char* n : names) {
    replica_status r;
    r.id = std::uint32_t(out.size());
    r.name = n;
    out.push_back(r);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_placement_names_its_replica) {
  const auto j = watch_fields(placement_event{"r1", replica_id{1}, "prefix 3 blocks", true}, named({"prefill-0", "decode-0"}));
  BOOST_TEST(j["request"].get<std::string>() == "r1");
  BOOST_TEST(j["replica"].get<std::string>() == "decode-0");
  BOOST_TEST(j["why"].get<std::string>() == "prefix 3 blocks");
  BOOST_TEST(j["handoff"].get<bool>());
}

BOOST_AUTO_TEST_CASE(a_migration_names_both_ends_and_an_unknown_id_stays_a_number) {
  const auto j = watch_fields(migration_event{"r2", replica_id{0}, replica_id{7}, 0.25}, named({"decode-0", "decode-1"}));
  BOOST_TEST(j["from"].get<std::string>() == "decode-0");
  BOOST_TEST(j["to"].get<std::uint32_t>() == 7u);
  BOOST_TEST(j["seconds_to_first_token"].get<double>() == 0.25);
}

BOOST_AUTO_TEST_CASE(a_refusal_carries_its_pool_reason_and_wait) {
  const auto j = watch_fields(admission_event{"r3", "decode", false, 2, "queue full", 4}, {});
  BOOST_TEST(j["pool"].get<std::string>() == "decode");
  BOOST_TEST(!j["admitted"].get<bool>());
  BOOST_TEST(j["priority"].get<int>() == 2);
  BOOST_TEST(j["reason"].get<std::string>() == "queue full");
  BOOST_TEST(j["retry_after"].get<double>() == 4.0);
}
