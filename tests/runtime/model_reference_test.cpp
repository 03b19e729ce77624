// The engine's model against an independent PyTorch implementation (tests/reference), run with
// Debian's python3-torch: teacher-forced logits and greedy generation.
#define BOOST_TEST_MODULE model_reference
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <filesystem>
#include <map>
#include <algorithm>

#include "runtime/engine/engine.h"
#include "runtime/model/llama_model.h"
#include "tests/support/models.h"

using namespace troupe;

namespace {

constexpr int seq_len = 64, greedy_prompt = 8, greedy_tokens = 64;

std::vector<std::int32_t> test_ids(int vocab) {
  std::vector<std::int32_t> ids(seq_len);
  for (int i = 0; i < seq_len; ++i) ids[std::size_t(i)] = (i * 7919 + 104729 % 997) % vocab;
  return ids;
}

struct reference_run {
  std::vector<double> logits;  // [seq_len][vocab]
  std::vector<std::int32_t> greedy;
};

struct reference_case {
  std::string name;
  model::synth_options opts;
};

// Every model the suite checks: synthesized, and run through the reference in one Python start
// (importing torch takes longer than a small model's forward).
const std::vector<reference_case>& reference_cases() {
  static const std::vector<reference_case> cases = [] {
    auto gemma3 = test::preset("tiny", "gemma3");
    gemma3.layers = 6;  // five windowed layers and a global one
    auto smollm3 = test::preset("tiny", "smollm3");
    smollm3.layers = 4;  // the fourth without RoPE
    auto yarn = test::preset("tiny", "qwen2");
    yarn.rope_scaling = "yarn";  // Qwen2.5's long contexts
    auto phi4 = test::preset("tiny", "phi3");  // Phi-4-mini's shape: 3/4 of each head rotated, tied embeddings
    phi4.partial_rotary = 0.75;
    phi4.tied_embeddings = true;
    auto dynamic = test::preset("tiny");
    dynamic.rope_scaling = "dynamic";
    auto tied = test::preset("small");
    tied.tied_embeddings = true;
    tied.llama3_rope_scaling = true;
    tied.seed = 3;
    return std::vector<reference_case>{
        {"small-llama-f32", test::preset("small")},
        {"small-qwen2-f32", test::preset("small", "qwen2")},
        {"small-llama-tied-rope3-f32", tied},
        {"small-llama-f16", test::preset("small", "llama", kernels::dtype::f16)},
        {"small-mistral-bf16", test::preset("small", "mistral", kernels::dtype::bf16)},
        {"moe-mixtral-f32", test::preset("moe", "mixtral")},
        {"moe-qwen2-moe-f32", test::preset("moe", "qwen2_moe")},
        {"moe-qwen3-moe-bf16", test::preset("moe", "qwen3_moe", kernels::dtype::bf16)},
        {"tiny-gemma2-f32", test::preset("tiny", "gemma2")},
        {"tiny-gemma3-6-layers-f32", gemma3},
        {"tiny-granite-f32", test::preset("tiny", "granite")},
        {"tiny-olmo2-f32", test::preset("tiny", "olmo2")},
        {"tiny-smollm3-4-layers-f32", smollm3},
        {"tiny-qwen3-f32", test::preset("tiny", "qwen3")},
        {"tiny-qwen2-yarn-f32", yarn},
        {"tiny-phi3-f32", test::preset("tiny", "phi3")},
        {"tiny-llama-dynamic-ntk-f32", dynamic},
        {"tiny-phi4-partial-rotary-tied-f32", phi4},
    };
  }();
  return cases;
}

std::string model_dir_of(const reference_case& c) { return test::synth_model(c.name, c.opts); }

int vocab_of(const std::string& dir) {
  return nlohmann::json::parse(std::ifstream(dir + "/config.json"))["vocab_size"].get<int>();
}

reference_run read_reference(const std::string& out) {
  reference_run r;
  std::ifstream lf(out + "/logits.f64", std::ios::binary);
  lf.seekg(0, std::ios::end);
  r.logits.resize(std::size_t(lf.tellg()) / 8);
  lf.seekg(0);
  lf.read(reinterpret_cast<char*>(r.logits.data()), std::streamsize(r.logits.size() * 8));
  r.greedy = nlohmann::json::parse(std::ifstream(out + "/greedy.json")).get<std::vector<std::int32_t>>();
  return r;
}

// The reference's answers for case `name`, all cases computed on the first call.
const reference_run& reference_of(const std::string& name) {
  static std::map<std::string, reference_run> runs;
  if (runs.empty()) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& c : reference_cases()) {
      const std::string dir = model_dir_of(c), out = dir + "/reference";
      std::filesystem::create_directories(out);
      std::ofstream(out + "/ids.json") << nlohmann::json(test_ids(vocab_of(dir))).dump();
      jobs.push_back({{"model_dir", dir}, {"ids_file", out + "/ids.json"}, {"out_dir", out},
                      {"prompt_len", greedy_prompt}, {"tokens", greedy_tokens}});
    }
    const std::string jobs_file = std::string(TROUPE_BINARY_DIR) + "/model_reference_jobs.json";
    std::ofstream(jobs_file) << jobs.dump();
    const std::string cmd = "/usr/bin/python3 " + std::string(TROUPE_SOURCE_DIR) + "/tests/reference/llama_reference.py --jobs " + jobs_file;
    BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, "reference failed: " << cmd);
    for (const auto& c : reference_cases()) runs[c.name] = read_reference(model_dir_of(c) + "/reference");
  }
  return runs.at(name);
}

// Max |ours - reference| over all teacher-forced logits, through the paged forward pass.
double teacher_forced_error(const model::llama_model& m, const std::vector<std::int32_t>& ids,
                            const std::vector<double>& ref) {
  const auto& c = m.config();
  kv::kv_cache cache({8, 16, kernels::dtype::f32}, c.num_hidden_layers, c.num_key_value_heads, c.head_dim);
  std::vector<std::int32_t> table = {3, 0, 7, 1};  // deliberately out of order
  model::forward_batch b;
  for (int p = 0; p < seq_len; ++p) {
    b.tokens.push_back(ids[std::size_t(p)]);
    b.positions.push_back(p);
    b.tables.push_back(table.data());
    b.logit_rows.push_back(p);
  }
  std::vector<float> logits(std::size_t(seq_len) * std::size_t(c.vocab_size));
  model::forward_workspace ws;
  m.forward(b, cache, logits.data(), ws);
  BOOST_TEST_REQUIRE(ref.size() == logits.size());
  double worst = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::abs(double(logits[i]) - ref[i]));
  return worst;
}

void check_against_reference(const std::string& name, double tolerance) {
  const auto& cases = reference_cases();
  const auto c = std::find_if(cases.begin(), cases.end(), [&](const reference_case& x) { return x.name == name; });
  BOOST_TEST_REQUIRE((c != cases.end()), "no reference case " << name);
  const std::string dir = model_dir_of(*c);
  auto m = std::shared_ptr<model::llama_model>(model::llama_model::load(dir));
  const auto ids = test_ids(m->config().vocab_size);
  const reference_run& ref = reference_of(name);
  const double err = teacher_forced_error(*m, ids, ref.logits);
  BOOST_TEST_MESSAGE(name << ": max |logit difference| over " << seq_len << " positions = " << err);
  BOOST_TEST(err <= tolerance);

  auto e = engine::cpu_engine(m, nullptr, {});
  engine::request r{"greedy", {ids.begin(), ids.begin() + greedy_prompt}, {}, {}, 0};
  r.params.temperature = 0;
  r.params.max_tokens = greedy_tokens;
  r.params.ignore_eos = true;
  auto out = engine::generate_all(e, {r});
  BOOST_TEST(out[0] == ref.greedy, boost::test_tools::per_element());
  BOOST_TEST(e.blocks().num_free() == e.blocks().num_blocks());
}

}  // namespace

// Weights are converted to f32 exactly (every f16 and bf16 value is an f32 value) and the
// reference upcasts the same stored values, so every dtype is held to the same 1e-4: what is
// compared is the arithmetic, and it is f32 arithmetic in all cases.
BOOST_AUTO_TEST_CASE(llama_small_f32) { check_against_reference("small-llama-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(qwen2_small_with_qkv_bias) { check_against_reference("small-qwen2-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(llama_small_tied_embeddings_llama3_rope) { check_against_reference("small-llama-tied-rope3-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(llama_small_f16_weights) { check_against_reference("small-llama-f16", 1e-4); }

BOOST_AUTO_TEST_CASE(mistral_small_bf16_weights) { check_against_reference("small-mistral-bf16", 1e-4); }

// Mixture-of-experts families, each with its own routing normalization (and Qwen2-MoE's gated
// shared expert and dense first layer, Qwen3-MoE's per-head q/k norms), against the reference.
BOOST_AUTO_TEST_CASE(mixtral_moe) { check_against_reference("moe-mixtral-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(qwen2_moe_with_a_shared_expert_and_a_dense_layer) { check_against_reference("moe-qwen2-moe-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(qwen3_moe_with_qk_norms) { check_against_reference("moe-qwen3-moe-bf16", 1e-4); }

// The families whose recipe llama.cpp computes otherwise by design (Gemma's GELU, from an F16
// table there; llama_cpp_reference_test holds those to 1e-2) or that it was not checked on
// here: against Hugging Face's definitions in float64, through the paged forward and the
// engine's greedy decode past Gemma's 32-position windows.
BOOST_AUTO_TEST_CASE(gemma2_with_soft_caps_and_windows) { check_against_reference("tiny-gemma2-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(gemma3_with_local_rope_and_windows) { check_against_reference("tiny-gemma3-6-layers-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(granite_with_multipliers) { check_against_reference("tiny-granite-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(olmo2_with_norms_after_the_sublayers) { check_against_reference("tiny-olmo2-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(smollm3_with_a_layer_without_rope) { check_against_reference("tiny-smollm3-4-layers-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(qwen3_dense_with_qk_norms) { check_against_reference("tiny-qwen3-f32", 1e-4); }

BOOST_AUTO_TEST_CASE(qwen2_with_yarn) { check_against_reference("tiny-qwen2-yarn-f32", 1e-4); }

// Phi-3: fused qkv and gate_up projections, longrope's long divisors and attention factor.
BOOST_AUTO_TEST_CASE(phi3_with_fused_projections_and_longrope) { check_against_reference("tiny-phi3-f32", 1e-4); }

// Phi-4-mini: RoPE on the first 12 of each head's 16 dimensions, tied embeddings.
BOOST_AUTO_TEST_CASE(phi4_with_partial_rotary) { check_against_reference("tiny-phi4-partial-rotary-tied-f32", 1e-4); }

// Dynamic NTK: every position rotated by the base reached at max_position_embeddings x factor.
BOOST_AUTO_TEST_CASE(llama_with_dynamic_ntk) { check_against_reference("tiny-llama-dynamic-ntk-f32", 1e-4); }
