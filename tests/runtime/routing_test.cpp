#define BOOST_TEST_MODULE routing
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/routing/policy.h"

using namespace troupe::routing;

namespace {
std::vector<replica_load> three() {
  return {{0, true, 4, 0, 100, 100}, {1, true, 1, 900, 100, 100}, {2, true, 2, 0, 100, 100}};
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
