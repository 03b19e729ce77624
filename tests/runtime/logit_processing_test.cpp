// The OpenAI fields that were accepted and ignored, now honoured by the engine: logit_bias
// moves the choice, min_tokens holds EOS, stop ids and stop strings back, and
// include_stop_str_in_output keeps the matched stop string. Each compared with a plain run.
#define BOOST_TEST_MODULE logit_processing
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "runtime/engine/engine.h"
#include "runtime/sampling/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

struct run {
  std::vector<std::int32_t> tokens;
  std::string text;
  engine::finish_reason reason = engine::finish_reason::none;
};

std::shared_ptr<const model::llama_model> tiny() {
  static auto m = std::shared_ptr<const model::llama_model>(model::llama_model::load(test::synth_model("tiny-llama-f32", test::preset("tiny"))));
  return m;
}
std::shared_ptr<const tokenizer::tokenizer> tiny_tok() {
  static std::shared_ptr<const tokenizer::tokenizer> t =
      tokenizer::tokenizer::load(test::synth_model("tiny-llama-f32", test::preset("tiny")) + "/tokenizer.json");
  return t;
}

run generate(const sampling::sampling_params& p) {
  auto e = engine::cpu_engine(tiny(), tiny_tok(), {});
  engine::request r;
  r.id = "r";
  r.prompt = {5, 17, 300, 40};
  r.params = p;
  e.add_request(r);
  run out;
  while (e.has_unfinished())
    for (auto& o : e.step()) {
      out.tokens.insert(out.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      out.text += o.text_delta;
      if (o.finished) out.reason = o.reason;
    }
  return out;
}

sampling::sampling_params greedy(int max_tokens) {
  sampling::sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(logit_bias_moves_the_choice) {
  const run plain = generate(greedy(8));
  const std::int32_t forced = plain.tokens[0] == 123 ? 124 : 123;
  auto p = greedy(8);
  p.logit_bias = {{forced, 100.0f}};
  BOOST_TEST(generate(p).tokens == std::vector<std::int32_t>(8, forced), boost::test_tools::per_element());
  p.logit_bias = {{plain.tokens[0], -100.0f}};
  BOOST_TEST(generate(p).tokens[0] != plain.tokens[0]);
}

BOOST_AUTO_TEST_CASE(min_tokens_holds_stop_tokens_and_strings_back) {
  const run plain = generate(greedy(12));
  auto p = greedy(12);
  p.stop_token_ids = {plain.tokens[0]};
  const run stopped = generate(p);
  BOOST_TEST(stopped.tokens.size() == 1u);
  BOOST_TEST(int(stopped.reason) == int(engine::finish_reason::stop));
  p.min_tokens = 5;
  const run held = generate(p);
  BOOST_TEST_REQUIRE(held.tokens.size() >= 5u);
  for (int i = 0; i < 5; ++i) BOOST_TEST(held.tokens[std::size_t(i)] != plain.tokens[0]);
  // A stop string found in the first tokens' text does not end the output before min_tokens.
  auto s = greedy(12);
  s.stop = {plain.text.substr(0, 1)};
  const std::size_t at_stop = generate(s).tokens.size();
  BOOST_TEST(at_stop < 12u);
  s.min_tokens = int(at_stop) + 3;
  BOOST_TEST(generate(s).tokens.size() >= at_stop + 3);
}

BOOST_AUTO_TEST_CASE(include_stop_str_in_output_keeps_the_stop_string) {
  const run plain = generate(greedy(16));
  BOOST_TEST_REQUIRE(plain.text.size() >= 6u);
  const std::string stop = plain.text.substr(3, 2);
  const std::size_t at = plain.text.find(stop);
  auto p = greedy(16);
  p.stop = {stop};
  BOOST_TEST(generate(p).text == plain.text.substr(0, at));
  p.include_stop_str_in_output = true;
  BOOST_TEST(generate(p).text == plain.text.substr(0, at + stop.size()));
}

BOOST_AUTO_TEST_CASE(processors_ban_eos_only_while_below_min_tokens) {
  std::vector<float> logits(8, 0.0f);
  sampling::sampling_params p;
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  p.logit_bias = {{5, 2.5f}, {99, 1.0f}};  // 99 is outside this vocabulary: ignored
  const std::vector<std::int32_t> eos = {7};
  sampling::apply_logit_processors(logits, p, 1, eos);
  BOOST_TEST(std::isinf(logits[3]));
  BOOST_TEST(std::isinf(logits[7]));
  BOOST_TEST(logits[5] == 2.5f);
  std::vector<float> later(8, 0.0f);
  sampling::apply_logit_processors(later, p, 2, eos);
  BOOST_TEST(later[3] == 0.0f);
  BOOST_TEST(later[7] == 0.0f);
}
