// Tensor parallelism in the model (runtime/model/tensor_shard.h): ranks on threads of one
// process, each holding its shard of the weights and its KV heads, joined by the shared-memory
// collectives. A TP group's greedy tokens equal the whole model's, its logits are within 1e-4
// of them at every step, and two runs of the group give the same bits (the reduction order is
// fixed). A model whose KV heads do not divide over the ranks is refused, naming why.
#define BOOST_TEST_MODULE tensor_parallel
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <thread>

#include "runtime/collectives/shm.h"
#include "runtime/common/error.h"
#include "tests/support/models.h"
#include "tests/support/tp_run.h"

using namespace troupe;
using test::run_output;
using test::generate;

namespace {

// The same, with `n` ranks on threads; every rank's output must agree (checked here).
run_output generate_tp(const std::string& dir, int n, const std::vector<std::int32_t>& prompt, int steps, bool ep = false) {
  std::vector<std::unique_ptr<model::llama_model>> shards;
  for (int r = 0; r < n; ++r) shards.push_back(model::llama_model::load(dir, {}, {r, n, ep}));
  auto group = collectives::make_shm_group({n, 1, std::chrono::milliseconds(120000)});
  std::vector<run_output> outs(static_cast<std::size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] { outs[std::size_t(r)] = generate(*shards[std::size_t(r)], group[std::size_t(r)].get(), prompt, steps); });
  for (auto& t : ranks) t.join();
  for (int r = 1; r < n; ++r) {
    BOOST_TEST(outs[std::size_t(r)].tokens == outs[0].tokens);
    BOOST_TEST((outs[std::size_t(r)].logits == outs[0].logits), "rank " << r << "'s logits differ from rank 0's");
  }
  return outs[0];
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// The gap between the best and second-best logit: a step whose gap is below the tolerance could
// flip between runs that differ by rounding, and is not a fair comparison.
float top_gap(std::vector<float> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

void check_matches_whole(const std::string& dir, int n, bool ep = false) {
  const auto whole = model::llama_model::load(dir);
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 37 + 11) % (whole->config().vocab_size - 10) + 3);
  const int steps = 10;
  const run_output ref = generate(*whole, nullptr, prompt, steps);
  const run_output tp = generate_tp(dir, n, prompt, steps, ep);
  BOOST_REQUIRE_EQUAL(tp.logits.size(), ref.logits.size());
  for (std::size_t s = 0; s < ref.logits.size(); ++s) {
    BOOST_TEST(max_abs_diff(tp.logits[s], ref.logits[s]) <= 1e-4f, dir << (ep ? " ep=" : " tp=") << n << " step " << s);
    BOOST_TEST(top_gap(ref.logits[s]) > 1e-3f, "step " << s << " is a near-tie; pick another prompt");
  }
  BOOST_TEST(tp.tokens == ref.tokens, dir << " tp=" << n);
  // Run after run, the same bits.
  const run_output again = generate_tp(dir, n, prompt, steps, ep);
  BOOST_TEST((again.logits == tp.logits), dir << " tp=" << n << ": a second run differs");
}

}  // namespace

BOOST_AUTO_TEST_CASE(two_and_four_ranks_give_the_whole_models_tokens_and_logits) {
  const std::string dir = test::synth_model("small-llama-f32", test::preset("small"));
  check_matches_whole(dir, 2);
  check_matches_whole(dir, 4);
}

BOOST_AUTO_TEST_CASE(qkv_biases_and_a_tied_lm_head_split_too) {
  auto qwen = test::preset("tiny", "qwen2");
  check_matches_whole(test::synth_model("tiny-qwen2-f32", qwen), 2);
  auto tied = test::preset("tiny");
  tied.tied_embeddings = true;
  check_matches_whole(test::synth_model("tiny-llama-tied-f32", tied), 2);
  check_matches_whole(test::synth_model("tiny-llama-bf16", test::preset("tiny", "llama", kernels::dtype::bf16)), 2);
}

BOOST_AUTO_TEST_CASE(a_split_the_kv_heads_do_not_allow_is_refused_naming_why) {
  const std::string dir = test::tiny_model_dir();  // 2 KV heads
  try {
    model::llama_model::load(dir, {}, {0, 4});
    BOOST_FAIL("tensor_parallel = 4 over 2 KV heads was accepted");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("tensor_parallel = 4 does not divide num_key_value_heads = 2") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_shard_run_without_its_group_is_refused) {
  const std::string dir = test::tiny_model_dir();
  auto shard = model::llama_model::load(dir, {}, {1, 2});
  kv::kv_cache cache({4, 16, kernels::dtype::f32, false}, shard->config().num_hidden_layers, shard->kv_heads(), shard->config().head_dim);
  std::vector<std::int32_t> table{0};
  model::forward_batch b{{5}, {0}, {table.data()}, {0}};
  model::forward_workspace ws;
  std::vector<float> logits(std::size_t(shard->config().vocab_size));
  BOOST_CHECK_THROW(shard->forward(b, cache, logits.data(), ws, nullptr), std::invalid_argument);
}

// Mixture-of-experts layers split too: every rank routes every token (the router is whole on
// each), runs its slice of each chosen expert (and of the shared expert), and the partial sums
// are added by the layer's all-reduce.
BOOST_AUTO_TEST_CASE(mixture_of_experts_layers_split_by_expert_features) {
  for (const char* arch : {"mixtral", "qwen2_moe", "qwen3_moe"})
    check_matches_whole(test::synth_model(std::string("moe-") + arch + "-tp-f32", test::preset("moe", arch)), 2);
}

// Expert parallel: each rank holds whole experts (a quarter or half of them) and the tokens
// travel to their experts' ranks and back by all-to-all; attention is split over the same ranks.
BOOST_AUTO_TEST_CASE(expert_parallel_ranks_dispatch_tokens_to_their_experts) {
  for (const char* arch : {"mixtral", "qwen2_moe", "qwen3_moe"})
    check_matches_whole(test::synth_model(std::string("moe-") + arch + "-tp-f32", test::preset("moe", arch)), 2, true);
  check_matches_whole(test::synth_model("moe-mixtral-tp-f32", test::preset("moe", "mixtral")), 4, true);
}

BOOST_AUTO_TEST_CASE(expert_parallel_needs_experts) {
  try {
    model::llama_model::load(test::tiny_model_dir(), {}, {0, 2, true});
    BOOST_FAIL("expert_parallel on a dense model was accepted");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("expert_parallel = 2 needs a mixture-of-experts model") != std::string::npos, e.what());
  }
}
