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

// A drain that arrives while a step is in flight, the step that finishes the replica's last
// request, is answered once that step ends: nothing is left to hand off, so the replica is empty.
// (It was never answered: the step's end scheduled no further step with nothing left to run, and
// only a step checked a draining replica for emptiness; a rollout's swap then waited forever.)
BOOST_AUTO_TEST_CASE(a_drain_during_the_step_that_finishes_the_last_request_is_answered) {
  config cfg;
  caf::actor_system sys{cfg};
  sim::gpu_spec slow;
  slow.step_overhead_s = 0.2;  // each step in flight for 200 ms: the drain arrives during it
  auto sched = sys.spawn(sim_scheduler, small_model()->config(), slow, test::engine_cfg(64, 512));
  caf::scoped_actor self{sys};
  engine::request r;
  r.id = "last";
  r.prompt = {5, 6, 7, 8};
  r.params.temperature = 0;
  r.params.max_tokens = 1;  // finished by its first step
  // The reply comes after the scheduler queued its step to itself: the drain is queued behind it.
  self->request(sched, request_timeout, submit_atom::value, r, caf::actor_cast<token_sink>(self))
      .receive([](bool accepted) { BOOST_TEST_REQUIRE(accepted); }, [&](caf::error& err) { BOOST_FAIL(sys.render(err)); });
  bool drained = false;
  self->request(sched, request_timeout, drain_atom::value)
      .receive([&](bool d) { drained = d; }, [&](caf::error& err) { BOOST_FAIL("no answer to the drain: " << sys.render(err)); });
  BOOST_TEST(drained);
  self->receive([&](token_batch& b) {
    BOOST_TEST_REQUIRE(b.updates.size() == 1u);
    BOOST_TEST(b.updates[0].finished);
    BOOST_TEST(int(b.updates[0].reason) == int(engine::finish_reason::length));  // it ran to the end, not handed off
  }, caf::after(request_timeout) >> [] { BOOST_FAIL("no token batch"); });
  self->send_exit(sched, caf::exit_reason::user_shutdown);
}
