// Speculative decoding's pure parts (runtime/speculative): the n-gram proposer finds what the
// text did the last time, and exact acceptance over verify rows gives, token for token and
// logprob for logprob, what one-token decode steps give, greedy and seeded, with penalties.
#define BOOST_TEST_MODULE speculative
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "runtime/sampling/sample_rows.h"
#include "runtime/speculative/ngram.h"
#include "runtime/speculative/policy.h"
#include "runtime/speculative/verify.h"

using namespace troupe;
using speculative::ngram_config;
using speculative::ngram_proposal;
using tokens = std::vector<std::int32_t>;

namespace {
tokens ngram_proposal3(const tokens& t, const ngram_config& c) { return ngram_proposal(t, c, 3); }
}  // namespace

BOOST_AUTO_TEST_CASE(ngram_proposes_what_followed_the_latest_suffix_the_last_time) {
  ngram_config c;
  c.min_n = 2, c.max_n = 3;
  // "7 8 9" appeared twice before; the later one was followed by 40 41 42.
  BOOST_TEST(ngram_proposal3(tokens{7, 8, 9, 1, 2, 7, 8, 9, 40, 41, 42, 43, 5, 7, 8, 9}, c) == (tokens{40, 41, 42}));
  // The longest suffix wins over a more recent shorter one: "3 8 9" matches at 3 tokens, "8 9" alone later.
  BOOST_TEST(ngram_proposal3(tokens{3, 8, 9, 50, 51, 6, 8, 9, 60, 61, 3, 8, 9}, c) == (tokens{50, 51, 6}));
  // Cut at the end of what is there.
  BOOST_TEST(ngram_proposal3(tokens{5, 6, 70, 5, 6}, c) == (tokens{70, 5, 6}));
  BOOST_TEST(ngram_proposal3(tokens{1, 2, 3, 4}, c).empty());  // nothing repeats
  BOOST_TEST(ngram_proposal3(tokens{9}, c).empty());
  c.min_n = 1;
  BOOST_TEST(ngram_proposal3(tokens{1, 2, 3, 4, 2}, c) == (tokens{3, 4, 2}));
}

BOOST_AUTO_TEST_CASE(ngram_searches_only_its_window) {
  ngram_config c;
  c.min_n = 2, c.max_n = 2, c.search_window = 8;
  tokens t{4, 5, 90, 91};
  for (int i = 0; i < 10; ++i) t.push_back(100 + i);
  t.push_back(4), t.push_back(5);
  BOOST_TEST(ngram_proposal(t, c, 2).empty());  // the match is 14 tokens back
  c.search_window = 16;
  BOOST_TEST(ngram_proposal(t, c, 2) == (tokens{90, 91}));
}

BOOST_AUTO_TEST_CASE(a_bad_configuration_is_named) {
  ngram_config c;
  BOOST_TEST(!c.invalid());
  c.min_n = 0;
  BOOST_TEST(c.invalid("pools.speculative").value_or("") == "pools.speculative.min_n: 0 is not in 1..16");
  c.min_n = 5, c.max_n = 3;
  BOOST_TEST(c.invalid().value_or("") == "speculative.min_n: 5 is above max_n (3)");
}

namespace {

constexpr int vocab = 48;

// A stand-in target whose logits at a position depend on every token before it (as a model's
// do), drawn from a hash of that prefix.
std::vector<float> target_logits(const tokens& prefix) {
  std::uint64_t h = 1469598103934665603ull;
  for (auto t : prefix) h = (h ^ std::uint64_t(t)) * 1099511628211ull;
  std::mt19937_64 g(h);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(vocab);
  for (auto& x : l) x = d(g);
  l[std::size_t(prefix.back() % vocab)] += 3.0f;  // some structure for the proposer to find
  return l;
}

sampling::sampled_token choose(const sampling::sampling_row& row, const tokens& prefix) {
  const auto l = target_logits(prefix);
  return sampling::sample_rows(l, std::span(&row, 1), vocab, {})[0];
}

struct run {
  tokens out;
  std::vector<float> logprobs;
};

sampling::sampling_row first_row(const sampling::sampling_params& p, const tokens& prompt) {
  sampling::sampling_row r;
  r.params = p;
  r.seed = 1234;
  r.prompt_len = std::int32_t(prompt.size());
  if (sampling::needs_history(p)) r.history = prompt;
  return r;
}

run plain_decode(const sampling::sampling_params& p, const tokens& prompt, int n) {
  run out;
  tokens seq = prompt;
  sampling::sampling_row row = first_row(p, prompt);
  for (int i = 0; i < n; ++i) {
    row.num_output = i;
    const auto t = choose(row, seq);
    out.out.push_back(t.token), out.logprobs.push_back(t.logprobs.logprob);
    seq.push_back(t.token);
    if (!row.history.empty()) row.history.push_back(t.token);
  }
  return out;
}

// The same, k tokens proposed at a time, each verify row judged as the sampler chooses it. The
// proposals: n-gram lookup on even steps; on odd ones the plain run's own next tokens (a draft
// that agrees with the target, so rows after accepted tokens are used under every setting), half
// the time with one wrong token in them.
run speculative_decode(const sampling::sampling_params& p, const tokens& prompt, const tokens& oracle, int* steps, int* accepted) {
  const int n = int(oracle.size());
  run out;
  tokens seq = prompt;
  ngram_config c;
  c.min_n = 1, c.max_n = 3;
  std::mt19937 g(7);
  while (int(out.out.size()) < n) {
    tokens proposed = ngram_proposal(seq, c, 4);
    if (*steps % 2) {
      const std::size_t at = out.out.size(), k = std::min<std::size_t>(4, oracle.size() - at);
      proposed.assign(oracle.begin() + std::ptrdiff_t(at), oracle.begin() + std::ptrdiff_t(at + k));
    }
    if (g() % 2 && !proposed.empty()) proposed[g() % proposed.size()] = std::int32_t(g() % vocab);
    sampling::sampling_row row = first_row(p, prompt);
    row.num_output = std::int32_t(out.out.size());
    if (!row.history.empty()) row.history.insert(row.history.end(), out.out.begin(), out.out.end());
    const auto rows = speculative::verify_rows(row, proposed);
    BOOST_TEST_REQUIRE(rows.size() == proposed.size() + 1);
    std::vector<sampling::sampled_token> chosen;
    for (std::size_t j = 0; j < rows.size(); ++j) {
      tokens prefix = seq;
      prefix.insert(prefix.end(), proposed.begin(), proposed.begin() + std::ptrdiff_t(j));
      chosen.push_back(choose(rows[j], prefix));
    }
    const auto v = speculative::judge(proposed, chosen);
    BOOST_TEST_REQUIRE(!v.tokens.empty());
    BOOST_TEST_REQUIRE(v.tokens.size() == std::size_t(v.accepted) + 1);
    ++*steps, *accepted += v.accepted;
    for (const auto& t : v.tokens) {
      if (int(out.out.size()) == n) break;
      out.out.push_back(t.token), out.logprobs.push_back(t.logprobs.logprob);
      seq.push_back(t.token);
    }
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(speculation_gives_exactly_the_tokens_and_logprobs_of_plain_decoding) {
  const tokens prompt{1, 5, 9, 5, 9, 12, 1, 5, 9, 30};
  std::vector<sampling::sampling_params> cases(4);
  cases[0].temperature = 0;  // greedy
  cases[1].temperature = 0.8f, cases[1].top_p = 0.95f;
  cases[2].temperature = 0.8f, cases[2].top_k = 20, cases[2].repetition_penalty = 1.3f, cases[2].frequency_penalty = 0.4f;
  cases[3].temperature = 1.0f, cases[3].min_tokens = 10, cases[3].logit_bias = {{3, 2.0f}};
  for (auto& p : cases) p.logprobs = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    int steps = 0, accepted = 0;
    const run plain = plain_decode(cases[i], prompt, 60);
    const run spec = speculative_decode(cases[i], prompt, plain.out, &steps, &accepted);
    BOOST_TEST(spec.out == plain.out, boost::test_tools::per_element());
    BOOST_TEST(spec.logprobs == plain.logprobs, boost::test_tools::per_element());
    // The comparison means something only if proposals were both accepted and rejected.
    BOOST_TEST(accepted >= 20, "case " << i << ": " << accepted << " accepted in " << steps << " steps");
    BOOST_TEST(steps + accepted >= 60);
    BOOST_TEST(steps < 60);
  }
}

BOOST_AUTO_TEST_CASE(judge_keeps_the_agreeing_prefix_then_the_targets_token) {
  auto t = [](std::int32_t id) { return sampling::sampled_token{id, {}}; };
  const tokens proposed{4, 5, 6};
  auto v = speculative::judge(proposed, std::vector{t(4), t(5), t(6), t(7)});
  BOOST_TEST(v.accepted == 3);
  BOOST_TEST(v.tokens.size() == 4u);
  v = speculative::judge(proposed, std::vector{t(4), t(9), t(6), t(7)});
  BOOST_TEST(v.accepted == 1);
  BOOST_TEST(v.tokens.size() == 2u);
  BOOST_TEST(v.tokens[1].token == 9);
  v = speculative::judge({}, std::vector{t(3)});
  BOOST_TEST(v.accepted == 0);
  BOOST_TEST(v.tokens.size() == 1u);
  BOOST_CHECK_THROW(speculative::judge(proposed, std::vector{t(4)}), std::invalid_argument);
}

// The speculation policy (runtime/speculative/policy.h).

BOOST_AUTO_TEST_CASE(acceptance_follows_what_verify_steps_saw) {
  speculative::acceptance a;
  BOOST_TEST(a.rate() == 0.5);
  // Proposals accepted with probability 0.8 each, given the ones before (four a step).
  std::mt19937 g(3);
  std::bernoulli_distribution ok(0.8);
  for (int step = 0; step < 400; ++step) {
    int n = 0;
    while (n < 4 && ok(g)) ++n;
    a.observe(4, n);
  }
  BOOST_TEST(a.rate() > 0.6);
  BOOST_TEST(a.rate() < 0.95);
  // The text changes and nothing is accepted any more: the estimate follows within a few steps.
  for (int step = 0; step < 30; ++step) a.observe(4, 0);
  BOOST_TEST(a.rate() < 0.1);
  a.observe(0, 0);  // no proposal, no information
  BOOST_TEST(a.rate() < 0.1);
}

BOOST_AUTO_TEST_CASE(a_new_request_starts_from_its_replicas_acceptance) {
  speculative::acceptance replica;
  for (int i = 0; i < 50; ++i) replica.observe(4, 4);
  BOOST_TEST(replica.rate() > 0.9);
  auto fresh = speculative::acceptance::starting_from(replica);
  BOOST_TEST(fresh.rate() == replica.rate(), boost::test_tools::tolerance(1e-9));
  // Two pseudo-observations only: its own first rejections show at once.
  fresh.observe(4, 0);
  fresh.observe(4, 0);
  BOOST_TEST(fresh.rate() < 0.5);
  BOOST_TEST(speculative::acceptance::starting_from(speculative::acceptance{}).rate() == 0.5);
}

BOOST_AUTO_TEST_CASE(step_cost_learns_its_line_from_the_steps_it_sees) {
  speculative::step_cost c;
  BOOST_TEST(!c.seconds(8));
  c.observe(8, 0.010);
  c.observe(8, 0.010);
  BOOST_TEST(!c.seconds(8));  // one size only: no slope
  for (int rows : {1, 4, 16, 32, 64}) c.observe(rows, 0.005 + 0.0005 * rows);
  c.observe(8, 0.009);
  BOOST_TEST_REQUIRE(c.seconds(100).has_value());
  BOOST_TEST(*c.seconds(100) == 0.055, boost::test_tools::tolerance(0.05));
}

BOOST_AUTO_TEST_CASE(step_cost_learns_what_leaving_the_decode_path_costs) {
  // 80 ms a step, 4 ms a row, and 10 ms more for a step that verifies proposals.
  speculative::step_cost c;
  auto t = [](int rows, bool verifying) { return 0.080 + 0.004 * rows + (verifying ? 0.010 : 0.0); };
  for (int i = 0; i < 10; ++i) {
    for (int rows : {1, 2, 4}) c.observe(rows, t(rows, false), false);
    for (int rows : {2, 3, 5}) c.observe(rows, t(rows, true), true);
  }
  BOOST_TEST_REQUIRE(c.seconds(3, true).has_value());
  BOOST_TEST(*c.seconds(3, true) == t(3, true), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(*c.seconds(3, false) == t(3, false), boost::test_tools::tolerance(1e-6));
  // Only plain steps seen: the jump is not known, and taken as 0 until proposals measure it.
  speculative::step_cost plain;
  for (int rows : {1, 2, 4}) plain.observe(rows, t(rows, false), false);
  BOOST_TEST(*plain.seconds(3, true) == *plain.seconds(3, false));
}

namespace {

speculative::step_cost line(double fixed, double per_row) {
  speculative::step_cost c;
  for (int i = 0; i < 20; ++i)
    for (int rows : {1, 8, 32, 64}) c.observe(rows, fixed + per_row * rows);
  return c;
}

std::vector<int> plan(int base, std::vector<double> acc, const speculative::step_cost& c, double draft = 0,
                      bool explore = false, std::vector<int> catch_up = {}, double draft_per_position = 0,
                      std::optional<double> decode_seconds = std::nullopt) {
  speculative::plan_inputs in;
  in.base_rows = base;
  in.base_tokens = int(acc.size());
  in.acceptance = acc;
  in.k_max = 4;
  in.draft = {draft, draft_per_position};
  in.catch_up = catch_up;
  in.explore = explore;
  in.decode_seconds = decode_seconds;
  return speculative::plan_lengths(in, c);
}

}  // namespace

BOOST_AUTO_TEST_CASE(speculation_goes_deep_when_rows_are_nearly_free_and_off_when_they_are_not) {
  // Bound by reading the weights: 20 ms a step, 0.05 ms a row. Likely proposals go the whole way.
  const auto bandwidth = line(0.020, 0.00005);
  BOOST_TEST(plan(1, {0.8}, bandwidth) == (std::vector<int>{4}));
  // Bound by arithmetic: every row costs as much as the fixed part of a token. Nothing pays.
  const auto compute = line(0.0, 0.002);
  BOOST_TEST(plan(32, std::vector<double>(32, 0.8), compute) == std::vector<int>(32, 0));
  // Proposals never accepted are never made.
  BOOST_TEST(plan(1, {0.0}, bandwidth) == (std::vector<int>{0}));
  // Between the two: the likelier text gets the longer proposal.
  const auto mixed = line(0.010, 0.001);
  const auto k = plan(4, {0.9, 0.9, 0.3, 0.3}, mixed);
  BOOST_TEST(k[0] > k[2]);
  BOOST_TEST(k[0] >= 1);
  // A draft model's step is paid once per position: a dear draft shortens the proposals.
  const auto cheap = plan(1, {0.8}, bandwidth, 0.0);
  const auto dear = plan(1, {0.8}, bandwidth, 0.015);
  BOOST_TEST(dear[0] < cheap[0]);
  // Before the cost is known: one proposal each, to learn it.
  BOOST_TEST(plan(2, {0.7, 0.0}, speculative::step_cost{}) == (std::vector<int>{1, 0}));
  // A dear first proposal (the step leaves the decode path) that later ones pay for: the whole
  // depth, not nothing. 80 ms a step, 1 ms a row, 80 ms to verify at all.
  speculative::step_cost jump;
  for (int i = 0; i < 10; ++i)
    for (int rows : {1, 2, 3, 5}) {
      jump.observe(rows, 0.080 + 0.001 * rows, false);
      jump.observe(rows, 0.160 + 0.001 * rows, true);
    }
  BOOST_TEST(plan(1, {0.8}, jump) == (std::vector<int>{4}));
  BOOST_TEST(plan(1, {0.3}, jump) == (std::vector<int>{0}));
  // Exploring when nothing pays: one proposal, to the likeliest; when something pays, the plan as it was.
  BOOST_TEST(plan(3, {0.5, 0.8, 0.0}, compute, 0, true) == (std::vector<int>{0, 1, 0}));
  BOOST_TEST(plan(1, {0.8}, bandwidth, 0, true) == plan(1, {0.8}, bandwidth));
  BOOST_TEST(plan(1, {0.0}, compute, 0, true) == (std::vector<int>{0}));
  // How often: probe_every while verifying is cheap or not yet measured; when a step that
  // verifies costs 2.5 times a decode step (1.5 steps more), seldom enough that exploring costs
  // about 1%: every 150 steps or so.
  BOOST_TEST(speculative::explore_interval(speculative::step_cost{}, 32, 16) == 16);
  BOOST_TEST(speculative::explore_interval(bandwidth, 1, 16) == 16);
  speculative::step_cost batch_jump;
  for (int i = 0; i < 10; ++i)
    for (int rows : {30, 31, 32, 33}) {
      batch_jump.observe(rows, 0.010 + 0.0001 * rows, false);
      batch_jump.observe(rows, 0.030 + 0.0001 * rows, true);
    }
  const int every = speculative::explore_interval(batch_jump, 32, 16);
  BOOST_TEST(every >= 150);
  BOOST_TEST(every <= 155);
}

BOOST_AUTO_TEST_CASE(each_batch_size_is_planned_by_its_own_steps) {
  // Up to 16 rows a step reads the weights once: 60 ms whatever the rows. Beyond, 12 ms a row.
  auto t = [](int rows) { return rows <= 16 ? 0.060 : 0.060 + 0.012 * (rows - 16); };
  speculative::step_costs c;
  // Concurrency 4 for a while, verifying 4 proposals each (20 rows): dear.
  for (int i = 0; i < 30; ++i) {
    c.observe(4, 4, t(4), false);
    c.observe(4, 20, t(20), true);
  }
  // Then concurrency 1, plain steps. No line of its own yet: the line of all steps, which says
  // a step verifying 4 proposals costs 1.8 plain steps there, so a draft accepted 40% of the
  // time is not worth it.
  for (int i = 0; i < 30; ++i) c.observe(1, 1, t(1), false);
  BOOST_TEST(!c.local(1).seconds(1));
  BOOST_TEST_REQUIRE(c.at(1).seconds(5, true).has_value());
  BOOST_TEST(*c.at(1).seconds(5, true) > 1.5 * t(1));
  BOOST_TEST(plan(1, {0.4}, c.at(1)) == (std::vector<int>{0}));
  // One exploration at concurrency 1 gives it a line of its own, which is right: the proposals
  // are nearly free there, and the whole depth pays.
  c.observe(1, 2, t(2), true);
  BOOST_TEST_REQUIRE(c.local(1).seconds(5, true).has_value());
  BOOST_TEST(*c.at(1).seconds(5, true) == t(5), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(plan(1, {0.4}, c.at(1)) == (std::vector<int>{4}));
  BOOST_TEST(*c.at(4).seconds(20, true) == t(20), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(a_prefill_chunk_in_the_step_does_not_make_proposals_look_cheap) {
  // Bound by arithmetic: 1 ms a row. A step of a 512-row prefill chunk and 31 decodes costs 553
  // ms and yields 31 tokens; a proposal accepted 60% of the time adds 0.6 tokens for 1 ms, far
  // above the step's 56 tokens a second, yet below the 756 a second of the 31 decodes alone (41
  // ms): each proposal row is a decode row that yields less than one. At concurrency 32 on
  // kjv-1b, proposals in such steps left the draft 7% below speculation off.
  const auto compute = line(0.010, 0.001);
  const std::vector<double> acc(31, 0.6);
  BOOST_TEST(plan(543, acc, compute, 0, false, {}, 0, 0.041) == std::vector<int>(31, 0));
  // Bound by bandwidth at one decode (100 ms whatever its rows), the same chunk beside it: the
  // proposals' rows cost 1 ms each against a 100 ms step per token, and pay.
  BOOST_TEST(plan(513, {0.8}, compute, 0, false, {}, 0, 0.100) == (std::vector<int>{4}));
}

BOOST_AUTO_TEST_CASE(a_plan_that_gains_less_than_the_cost_models_error_is_not_taken) {
  // 20 ms a step; a draft round of 9.4 ms makes one proposal accepted half the time 2% faster
  // than plain decoding (1.5 tokens in 29.5 ms against 1 in 20 ms): inside the line's error.
  const auto bandwidth = line(0.020, 0.00005);
  BOOST_TEST(plan(1, {0.5}, bandwidth, 0.0094) == (std::vector<int>{0}));
  // At 5 ms a round the same proposal gains 20%: taken.
  BOOST_TEST(plan(1, {0.5}, bandwidth, 0.005)[0] >= 1);
}

BOOST_AUTO_TEST_CASE(a_draft_that_must_catch_up_first_proposes_only_where_that_pays) {
  // Bound by bandwidth (20 ms a step): a draft round costs 1 ms and each position it computes
  // 0.5 ms. Two equally likely sequences; the second's draft last ran 200 positions ago, so its
  // first proposal costs 100 ms of catching up: five steps' time for at most four tokens.
  const auto bandwidth = line(0.020, 0.00005);
  const auto k = plan(2, {0.8, 0.8}, bandwidth, 0.001, false, {0, 200}, 0.0005);
  BOOST_TEST(k[0] >= 1);
  BOOST_TEST(k[1] == 0);
  // Caught up, it proposes like the other.
  const auto both = plan(2, {0.8, 0.8}, bandwidth, 0.001, false, {0, 0}, 0.0005);
  BOOST_TEST(both[1] == both[0]);
  // An exploration pays what proposing costs as well: one that takes 5 steps' time of catching
  // up comes about every 500 steps instead of every 16.
  const int every = speculative::explore_interval(bandwidth, 1, 16, 0.100);
  BOOST_TEST(every >= 490);
  BOOST_TEST(every <= 510);
  BOOST_TEST(speculative::explore_interval(bandwidth, 1, 16, 0.0) == 16);
}
