// The rules a request meets wherever it enters, decided once: each problem names its field, a
// prompt the context cannot take is marked too long (the frontend's 413), and the API's rule
// that max_tokens must fit applies only when asked.
#define BOOST_TEST_MODULE request_check
#include <boost/test/unit_test.hpp>

#include "runtime/engine/request_check.h"

using namespace troupe;
using namespace troupe::engine;

namespace {

std::vector<std::int32_t> ids(int n, std::int32_t v = 5) { return std::vector<std::int32_t>(std::size_t(n), v); }

request_problem problem(std::vector<std::int32_t> prompt, sampling::sampling_params p, request_limits lim, std::vector<std::int32_t> generated = {},
                        int public_prefix = 0) {
  auto r = check_request(prompt, generated, p, public_prefix, lim);
  BOOST_TEST_REQUIRE(r.has_value());
  return *r;
}

const request_limits api{100, 64, true};     // the frontend's
const request_limits engine_side{100, 64, false};

}  // namespace

BOOST_AUTO_TEST_CASE(a_good_request_has_no_problem) {
  sampling::sampling_params p;
  p.max_tokens = 10;
  BOOST_TEST(!check_request(ids(20), {}, p, 0, api).has_value());
  BOOST_TEST(!check_request(ids(20), {}, p, 0, {0, 64, true}).has_value());  // vocabulary unknown: ids not checked
}

BOOST_AUTO_TEST_CASE(each_problem_names_its_field) {
  sampling::sampling_params p;
  BOOST_TEST(problem({}, p, api).field == "prompt");
  const auto vocab = problem({1, 2, 100}, p, api);
  BOOST_TEST(vocab.field == "prompt");
  BOOST_TEST(vocab.message == "prompt: token 2 is 100, outside the vocabulary [0, 100)");
  BOOST_TEST(problem(ids(3), p, api, {4, -1}).field == "generated");
  sampling::sampling_params hot;
  hot.temperature = 500;
  const auto t = problem(ids(3), hot, api);
  BOOST_TEST(t.field == "temperature");
  BOOST_TEST(t.message.find("'temperature'") != std::string::npos);
  BOOST_TEST(problem(ids(3), p, api, {}, -1).field == "public_prefix");
}

BOOST_AUTO_TEST_CASE(the_context_decides_413_and_400) {
  sampling::sampling_params p;
  p.max_tokens = 10;
  const auto whole = problem(ids(64), p, api);
  BOOST_TEST(whole.too_long);
  BOOST_TEST(whole.context);
  BOOST_TEST(whole.message.find("the prompt has 64 tokens") != std::string::npos);
  const auto over = problem(ids(60), p, api);  // 60 + 10 > 64: the API refuses, naming max_tokens
  BOOST_TEST(!over.too_long);
  BOOST_TEST(over.context);
  BOOST_TEST(over.field == "max_tokens");
  BOOST_TEST(!check_request(ids(60), {}, p, 0, engine_side).has_value());  // the engine just stops at the context's end
}

BOOST_AUTO_TEST_CASE(a_migrated_request_past_its_budget_is_refused) {
  sampling::sampling_params p;
  p.max_tokens = 2;
  const auto r = problem(ids(5), p, engine_side, {7, 8});
  BOOST_TEST(r.field == "max_tokens");
  BOOST_TEST(r.message.find("already reached") != std::string::npos);
  BOOST_TEST(problem(ids(40), p, engine_side, ids(30)).message.find("already fill the context") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_first_id_outside_is_found) {
  BOOST_TEST(!first_outside_vocabulary(std::vector<std::int32_t>{0, 99}, 100).has_value());
  BOOST_TEST(*first_outside_vocabulary(std::vector<std::int32_t>{0, 99, 100, -1}, 100) == 2u);
  BOOST_TEST(!first_outside_vocabulary(std::vector<std::int32_t>{-5}, 0).has_value());
}
