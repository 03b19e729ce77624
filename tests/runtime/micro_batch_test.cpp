// Cutting a step's plan into pipeline micro-batches (runtime/engine/micro_batch.h): cuts fall
// between sequences, token counts are balanced, every token and logit row lands in exactly one
// micro-batch with its own tables, and each row (and pooled span) remembers its place in the whole plan.
#define BOOST_TEST_MODULE micro_batch
#include <boost/test/unit_test.hpp>

#include "runtime/engine/micro_batch.h"

using namespace troupe::engine;

namespace {

// Sequences of the given token counts, each with a table {100 + s} and its last token as a
// logit row (as a decode or a prompt's last chunk has).
forward_plan plan_of(const std::vector<int>& lens) {
  forward_plan p;
  for (std::size_t s = 0; s < lens.size(); ++s) {
    p.tables.push_back({std::int32_t(100 + s)});
    for (int i = 0; i < lens[s]; ++i) {
      p.tokens.push_back(std::int32_t(1000 * s + std::size_t(i)));
      p.positions.push_back(i);
      p.seq_of_token.push_back(std::int32_t(s));
    }
    p.logit_rows.push_back(std::int32_t(p.tokens.size()) - 1);
    troupe::sampling::sampling_row row;
    row.seed = s;
    p.sampling.push_back(row);
  }
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(cuts_fall_between_sequences_and_balance_tokens) {
  const forward_plan p = plan_of({1, 1, 1, 1, 30, 1, 1, 1});  // 37 tokens; one long prefill chunk
  const auto mb = split_plan(p, 2);
  BOOST_REQUIRE_EQUAL(mb.size(), 2u);
  // The nearest sequence start to 18 tokens is the long chunk's (4) rather than its end (34).
  BOOST_TEST(mb[0].plan.tokens.size() == 4u);
  BOOST_TEST(mb[1].plan.tokens.size() == 33u);
  std::vector<std::int32_t> tokens, rows;
  for (const auto& m : mb) {
    tokens.insert(tokens.end(), m.plan.tokens.begin(), m.plan.tokens.end());
    rows.insert(rows.end(), m.rows.begin(), m.rows.end());
    BOOST_TEST(m.plan.logit_rows.size() == m.plan.sampling.size());
    for (std::size_t i = 0; i < m.plan.logit_rows.size(); ++i) {
      // A micro-batch's logit row is the same token as the whole plan's row it stands for.
      const auto whole_row = std::size_t(p.logit_rows[std::size_t(m.rows[i])]);
      BOOST_TEST(m.plan.tokens[std::size_t(m.plan.logit_rows[i])] == p.tokens[whole_row]);
      BOOST_TEST(m.plan.sampling[i].seed == p.sampling[std::size_t(m.rows[i])].seed);
    }
    for (std::size_t t = 0; t < m.plan.tokens.size(); ++t) {
      const auto s = std::size_t(m.plan.seq_of_token[t]);
      BOOST_TEST(m.plan.tables.at(s)[0] == 100 + m.plan.tokens[t] / 1000);  // its own sequence's table
    }
  }
  BOOST_TEST(tokens == p.tokens);
  BOOST_TEST((rows == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

BOOST_AUTO_TEST_CASE(never_more_micro_batches_than_sequences_and_one_is_the_plan) {
  const forward_plan p = plan_of({3, 5});
  BOOST_TEST(split_plan(p, 8).size() == 2u);
  const auto one = split_plan(p, 1);
  BOOST_REQUIRE_EQUAL(one.size(), 1u);
  BOOST_TEST(one[0].plan.tokens == p.tokens);
  BOOST_TEST(one[0].plan.logit_rows == p.logit_rows);
  BOOST_TEST(one[0].plan.tables == p.tables);
  BOOST_TEST(split_plan(forward_plan{}, 4).empty());
}

BOOST_AUTO_TEST_CASE(decode_batches_split_evenly) {
  const auto mb = split_plan(plan_of(std::vector<int>(16, 1)), 4);
  BOOST_REQUIRE_EQUAL(mb.size(), 4u);
  for (const auto& m : mb) BOOST_TEST(m.plan.tokens.size() == 4u);
}

// An embedding's pooled span goes with its sequence's tokens and remembers its place.
BOOST_AUTO_TEST_CASE(pooled_spans_go_with_their_sequence) {
  forward_plan p = plan_of({1, 1, 1, 1, 30, 1, 1, 1});
  p.pools.push_back({4, 30});  // the long chunk's rows, all of them
  p.pools.push_back({36, 1});  // the last sequence's row
  const auto mb = split_plan(p, 2);
  BOOST_REQUIRE_EQUAL(mb.size(), 2u);
  BOOST_TEST(mb[0].plan.pools.empty());
  BOOST_REQUIRE_EQUAL(mb[1].plan.pools.size(), 2u);
  BOOST_TEST(mb[1].plan.pools[0].first == 0);  // the long chunk starts the second micro-batch
  BOOST_TEST(mb[1].plan.pools[0].count == 30);
  BOOST_TEST(mb[1].plan.pools[1].first == 32);
  BOOST_TEST((mb[1].pools == std::vector<std::int32_t>{0, 1}));
  const auto whole = split_plan(p, 1);
  BOOST_TEST((whole[0].pools == std::vector<std::int32_t>{0, 1}));
}
