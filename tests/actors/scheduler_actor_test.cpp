// The scheduler actor runs the engine's continuous batching behind messages: concurrent
// requests get exactly the engine's own tokens, one token batch per step per destination.
#define BOOST_TEST_MODULE scheduler_actor
#include <boost/test/unit_test.hpp>

#include <caf/all.hpp>
#include <set>

#include "actors/serving/scheduler_actor.h"
#include "tests/support/engine_factory.h"
#include "tests/support/models.h"

using namespace troupe;
using namespace troupe::actors;

namespace {

using test::small_model;

struct config : caf::actor_system_config {
  config() { register_engine_protocol(*this); }
};

constexpr auto request_timeout = std::chrono::seconds(30);

void check_actor_matches_engine(bool greedy) {
  const auto reqs = test::mixed_requests(64, small_model()->config().vocab_size, greedy, 120);
  auto baseline = engine::cpu_engine(small_model(), nullptr, test::engine_cfg(64, 512));
  const auto expected = engine::generate_all(baseline, reqs);

  config cfg;
  caf::actor_system sys{cfg};
  auto sched = sys.spawn(scheduler, small_model(), std::shared_ptr<const tokenizer::tokenizer>(), test::engine_cfg(64, 512), group_config{}, kv_store_actor{});
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<token_sink>(self);
  for (auto& r : reqs)
    self->request(sched, request_timeout, submit_atom::value, r, sink)
        .receive([](bool accepted) { BOOST_TEST(accepted); },
                 [&](caf::error& err) { BOOST_FAIL("submit failed: " << sys.render(err)); });

  std::map<std::string, std::vector<std::int32_t>> got;
  std::map<std::string, int> finished;
  std::set<std::uint64_t> steps;
  std::size_t done = 0, batches = 0;
  while (done < reqs.size()) {
    self->receive(
        [&](token_batch& b) {
          ++batches;
          BOOST_TEST_REQUIRE(steps.insert(b.step).second, "two batches for step " << b.step);
          for (auto& u : b.updates) {
            auto& t = got[u.id];
            t.insert(t.end(), u.tokens.begin(), u.tokens.end());
            if (u.finished) {
              ++finished[u.id];
              ++done;
              BOOST_TEST(int(u.reason) == int(engine::finish_reason::length));
              BOOST_TEST(u.output_tokens == int(t.size()));
            }
          }
        },
        caf::after(std::chrono::seconds(120)) >> [&] { BOOST_FAIL("no token batch for 120 s"); });
  }
  BOOST_TEST_MESSAGE((greedy ? "greedy" : "seeded") << ": " << batches << " batches for " << reqs.size() << " requests");
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    BOOST_TEST(got[reqs[i].id] == expected[i], "request " << i);
    BOOST_TEST(finished[reqs[i].id] == 1);
  }
  self->request(sched, request_timeout, load_atom::value)
      .receive(
          [&](const load_report& r) {
            BOOST_TEST(r.used_blocks == 0);
            BOOST_TEST(r.running_seqs == 0);
            BOOST_TEST(r.steps == batches);  // one destination: one batch per step
          },
          [&](caf::error& err) { BOOST_FAIL(sys.render(err)); });
  self->send_exit(sched, caf::exit_reason::user_shutdown);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sixty_four_concurrent_greedy_requests_get_the_engines_tokens) { check_actor_matches_engine(true); }

BOOST_AUTO_TEST_CASE(sixty_four_concurrent_seeded_requests_get_the_engines_tokens) { check_actor_matches_engine(false); }

BOOST_AUTO_TEST_CASE(a_bad_request_is_refused_with_its_reason) {
  config cfg;
  caf::actor_system sys{cfg};
  auto sched = sys.spawn(scheduler, small_model(), std::shared_ptr<const tokenizer::tokenizer>(), test::engine_cfg(64, 512), group_config{}, kv_store_actor{});
  caf::scoped_actor self{sys};
  engine::request r;
  r.id = "empty";
  self->request(sched, request_timeout, submit_atom::value, r, caf::actor_cast<token_sink>(self))
      .receive([](bool) { BOOST_FAIL("accepted an empty prompt"); },
               [&](caf::error& err) { BOOST_TEST(sys.render(err).find("prompt is empty") != std::string::npos, sys.render(err)); });
  self->send_exit(sched, caf::exit_reason::user_shutdown);
}
