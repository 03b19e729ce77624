#define BOOST_TEST_MODULE scheduler
#include <boost/test/unit_test.hpp>

#include "runtime/sched/scheduler.h"

using namespace troupe::sched;

namespace {

scheduler_config cfg(int budget, int chunk, int block_size = 16) {
  scheduler_config c;
  c.max_num_batched_tokens = budget;
  c.long_prefill_chunk = chunk;
  c.block_size = block_size;
  return c;
}

seq_snapshot seq(std::uint64_t id, int tokens, int computed, int blocks, std::uint64_t arrival, int priority = 0) {
  return {id, tokens, computed, blocks, priority, arrival};
}

int tokens_for(const step_plan& p, std::uint64_t id) {
  for (auto& s : p.scheduled)
    if (s.id == id) return s.num_new_tokens;
  return 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_long_prompt_is_chunked_while_decodes_keep_running) {
  // Two decoding sequences and a 1000-token prompt; chunk 256, budget 512.
  std::vector<seq_snapshot> running = {seq(1, 41, 40, 3, 1), seq(2, 17, 16, 1, 2)};
  std::vector<seq_snapshot> waiting = {seq(3, 1000, 0, 0, 3)};
  auto p = plan_step(cfg(512, 256), running, waiting, 100);
  BOOST_TEST(tokens_for(p, 1) == 1);
  BOOST_TEST(tokens_for(p, 2) == 1);
  BOOST_TEST(tokens_for(p, 3) == 256);
  BOOST_TEST(p.admitted == std::vector<std::uint64_t>{3});
  BOOST_TEST(p.num_tokens == 258);
  // Next step: the prompt continues from 256 and the decodes still get their token.
  running.push_back(seq(3, 1000, 256, 16, 3));
  running[0].num_computed = 41, running[0].num_tokens = 42;
  running[1].num_computed = 17, running[1].num_tokens = 18;
  p = plan_step(cfg(512, 256), running, {}, 84);
  BOOST_TEST(tokens_for(p, 1) == 1);
  BOOST_TEST(tokens_for(p, 3) == 256);
  BOOST_TEST(p.scheduled.back().new_blocks == 16);  // 512 tokens need 32 blocks, it had 16
}

BOOST_AUTO_TEST_CASE(token_budget_limits_the_step) {
  std::vector<seq_snapshot> waiting = {seq(1, 300, 0, 0, 1), seq(2, 300, 0, 0, 2)};
  auto p = plan_step(cfg(400, 0), {}, waiting, 100);
  BOOST_TEST(tokens_for(p, 1) == 300);
  BOOST_TEST(tokens_for(p, 2) == 100);
  BOOST_TEST(p.num_tokens == 400);
}

BOOST_AUTO_TEST_CASE(out_of_blocks_preempts_the_newest_running_sequence) {
  // Both need a new block (tokens 33 > 2 blocks of 16); only one is free.
  std::vector<seq_snapshot> running = {seq(1, 33, 32, 2, 1), seq(2, 33, 32, 2, 2)};
  auto p = plan_step(cfg(512, 0), running, {seq(3, 5, 0, 0, 3)}, 0);
  BOOST_TEST(p.preempted == std::vector<std::uint64_t>{2});
  BOOST_TEST(tokens_for(p, 1) == 1);
  BOOST_TEST(tokens_for(p, 2) == 0);
  BOOST_TEST(p.admitted.empty());  // nothing admitted in a step that preempts
}

BOOST_AUTO_TEST_CASE(a_sequence_preempts_itself_when_nobody_is_behind_it) {
  std::vector<seq_snapshot> running = {seq(1, 33, 32, 2, 1)};
  auto p = plan_step(cfg(512, 0), running, {}, 0);
  BOOST_TEST(p.preempted == std::vector<std::uint64_t>{1});
  BOOST_TEST(p.scheduled.empty());
}

BOOST_AUTO_TEST_CASE(fcfs_does_not_let_later_arrivals_overtake) {
  std::vector<seq_snapshot> waiting = {seq(2, 20, 0, 0, 2), seq(1, 500, 0, 0, 1)};
  auto p = plan_step(cfg(1024, 0), {}, waiting, 10);  // the first arrival needs 32 blocks
  BOOST_TEST(p.scheduled.empty());
}

BOOST_AUTO_TEST_CASE(priority_order_runs_and_keeps_the_most_important) {
  scheduler_config c = cfg(512, 0);
  c.order = queue_order::priority;
  std::vector<seq_snapshot> waiting = {seq(1, 10, 0, 0, 1, 5), seq(2, 10, 0, 0, 2, 0)};
  auto p = plan_step(c, {}, waiting, 100);
  BOOST_TEST(p.admitted == (std::vector<std::uint64_t>{2, 1}));
  // Under pressure the lowest priority (highest value) is the victim, even if it came first.
  std::vector<seq_snapshot> running = {seq(1, 33, 32, 2, 1, 5), seq(2, 33, 32, 2, 2, 0)};
  p = plan_step(c, running, {}, 0);
  BOOST_TEST(p.preempted == std::vector<std::uint64_t>{1});
  BOOST_TEST(tokens_for(p, 2) == 1);
}

BOOST_AUTO_TEST_CASE(max_num_seqs_caps_admission) {
  scheduler_config c = cfg(512, 0);
  c.max_num_seqs = 2;
  std::vector<seq_snapshot> running = {seq(1, 11, 10, 1, 1)};
  auto p = plan_step(c, running, {seq(2, 5, 0, 0, 2), seq(3, 5, 0, 0, 3)}, 100);
  BOOST_TEST(p.admitted == std::vector<std::uint64_t>{2});
}
