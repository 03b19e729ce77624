#define BOOST_TEST_MODULE sampler
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/common/error.h"
#include "runtime/sampling/sample_rows.h"
#include "runtime/sampling/sampler.h"

using namespace troupe::sampling;

namespace {
sampling_params with_temperature(float t) {
  sampling_params p;
  p.temperature = t;
  return p;
}
}  // namespace

BOOST_AUTO_TEST_CASE(greedy_takes_the_argmax_and_the_lowest_id_on_ties) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  BOOST_TEST(choose_token(l, with_temperature(0), 1, 0) == 1);
}

BOOST_AUTO_TEST_CASE(draws_depend_only_on_seed_and_position) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[std::size_t(i)] = std::sin(float(i));
  auto p = with_temperature(1.0f);
  for (std::int64_t pos = 0; pos < 20; ++pos) BOOST_TEST(choose_token(l, p, 7, pos) == choose_token(l, p, 7, pos));
  int differ = 0;
  for (std::int64_t pos = 0; pos < 20; ++pos) differ += choose_token(l, p, 7, pos) != choose_token(l, p, 8, pos);
  BOOST_TEST(differ > 0);
}

BOOST_AUTO_TEST_CASE(sampling_follows_the_softmax_distribution) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = .1 .2 .3 .4
  std::map<int, int> counts;
  const int n = 20000;
  for (int pos = 0; pos < n; ++pos) ++counts[choose_token(l, with_temperature(1.0f), 42, pos)];
  for (int t = 0; t < 4; ++t) BOOST_TEST(std::abs(counts[t] / double(n) - (t + 1) / 10.0) < 0.015, "token " << t);
}

BOOST_AUTO_TEST_CASE(top_k_top_p_and_min_p_restrict_the_candidates) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  auto topk = with_temperature(1.0f);
  topk.top_k = 2;
  auto topp = with_temperature(1.0f);
  topp.top_p = 0.65f;  // .4 + .3 reaches it
  auto minp = with_temperature(1.0f);
  minp.min_p = 0.6f;  // keeps p >= .24: tokens 2 and 3
  for (int pos = 0; pos < 2000; ++pos) {
    BOOST_TEST_REQUIRE(choose_token(l, topk, 3, pos) >= 2);
    BOOST_TEST_REQUIRE(choose_token(l, topp, 3, pos) >= 2);
    BOOST_TEST_REQUIRE(choose_token(l, minp, 3, pos) >= 2);
  }
}

BOOST_AUTO_TEST_CASE(penalties_follow_their_definitions) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 1.0f};
  sampling_params p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<std::int32_t> prompt = {0, 1};
  std::vector<std::int32_t> output = {2, 2};
  apply_penalties(l, p, prompt, output);
  BOOST_TEST(l[0] == 1.0f);                     // positive: divided
  BOOST_TEST(l[1] == -4.0f);                    // negative: multiplied
  BOOST_TEST(l[2] == 0.5f - 0.5f - 0.5f);       // repetition, then presence + 2 x frequency
  BOOST_TEST(l[3] == 1.0f);                     // untouched
}

BOOST_AUTO_TEST_CASE(invalid_parameters_name_the_field) {
  sampling_params p;
  p.min_p = 2;
  BOOST_CHECK_EXCEPTION(p.validate(), troupe::input_error,
                        [](const troupe::input_error& e) { return std::string(e.what()).find("'min_p'") != std::string::npos; });
  p = {};
  p.max_tokens = 0;
  BOOST_CHECK_THROW(p.validate(), troupe::input_error);
}

// A structured output's mask, applied by sample_rows, must choose exactly what choose_token
// chooses over the row with every refused token at -inf: greedy (read in place) and sampled
// (masked a word at a time), over masks of whole allowed and refused words, mixed words, a last
// word past the vocabulary, and a mask shorter than the vocabulary (the rest refused).
BOOST_AUTO_TEST_CASE(a_mask_chooses_what_the_masked_row_chooses) {
  const int vocab = 200;  // not a multiple of 64: the last word is partial
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 11;
  };
  int rounds_with_refused_best = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<float> logits(vocab);
    for (auto& l : logits) l = float(next() % 20000) / 1000.0f - 10.0f;
    std::vector<std::uint64_t> allowed(round % 7 == 0 ? 2 : 4);  // every 7th: ids past 127 refused
    for (std::size_t w = 0; w < allowed.size(); ++w) {
      const int shape = int(next() % 4);
      allowed[w] = shape == 0 ? 0 : shape == 1 ? ~std::uint64_t(0) : next() & next();
    }
    if (std::none_of(allowed.begin(), allowed.end(), [](std::uint64_t b) { return b != 0; })) allowed[0] = 1;
    std::vector<float> masked = logits;
    for (int id = 0; id < vocab; ++id) {
      const std::size_t w = std::size_t(id) / 64;
      if (w >= allowed.size() || !((allowed[w] >> (id % 64)) & 1)) masked[std::size_t(id)] = -INFINITY;
    }
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    rounds_with_refused_best += masked[std::size_t(argmax)] == -INFINITY;
    for (float t : {0.0f, 0.8f}) {
      sampling_row row;
      row.params = with_temperature(t);
      row.seed = 99;
      row.num_output = round;
      row.allowed = allowed;
      const auto got = sample_rows(logits, std::span(&row, 1), vocab, std::vector<std::int32_t>{});
      BOOST_TEST_REQUIRE(got.size() == 1u);
      BOOST_TEST(got[0].token == choose_token(masked, row.params, 99, round), "round " << round << " temperature " << t);
    }
  }
  BOOST_TEST(rounds_with_refused_best > 50);  // the mask changed the choice, not only agreed with it
}
