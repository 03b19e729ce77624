// A LoRA adapter applied in the forward, beside the base weights: its logits are those of the
// base model with the adapter merged into its weights (a folder this test writes), and in a
// batch that mixes it with the base each sequence gets its own: the adapted rows the adapter's,
// the others the base's. Through the engine, requests name adapters by identity and get the
// merged model's tokens, several adapters and the base in one batch, with no prefix-cache block
// found across them.
#define BOOST_TEST_MODULE lora_forward
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/model/lora.h"
#include "runtime/model/safetensors.h"
#include "tests/support/lora_folders.h"
#include "tests/support/models.h"

using namespace troupe;
using namespace troupe::model;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-lora-forward-" + std::to_string(::getpid()));

// The last position's logits of each prompt, run as one batch; `adapted[i]` runs prompt i with `a`.
std::vector<std::vector<float>> last_logits(const llama_model& m, const std::vector<std::vector<std::int32_t>>& prompts,
                                            const std::vector<bool>& adapted, const lora_adapter* a) {
  const auto& c = m.config();
  kv::kv_cache cache({64, 16, kernels::dtype::f32, false}, c.num_hidden_layers, m.kv_heads(), c.head_dim);
  std::vector<std::vector<std::int32_t>> tables;
  for (std::size_t i = 0; i < prompts.size(); ++i) tables.push_back({std::int32_t(2 * i), std::int32_t(2 * i + 1)});
  forward_batch b;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (adapted[i]) b.adapters.push_back({std::int32_t(b.tokens.size()), std::int32_t(prompts[i].size()), a});
    for (std::size_t p = 0; p < prompts[i].size(); ++p) {
      b.tokens.push_back(prompts[i][p]);
      b.positions.push_back(std::int32_t(p));
      b.tables.push_back(tables[i].data());
    }
    b.logit_rows.push_back(std::int32_t(b.tokens.size() - 1));
  }
  forward_workspace ws;
  std::vector<float> logits(prompts.size() * std::size_t(c.vocab_size));
  m.forward(b, cache, logits.data(), ws, nullptr);
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    out.emplace_back(logits.begin() + std::ptrdiff_t(i * std::size_t(c.vocab_size)), logits.begin() + std::ptrdiff_t((i + 1) * std::size_t(c.vocab_size)));
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_adapter_in_the_forward_is_the_adapter_merged) {
  const std::string base_dir = test::tiny_model_dir();
  const auto base = llama_model::load(base_dir);
  const lora_adapter a = read_lora_adapter(test::write_lora_adapter(scratch / "adapter", base->config()).string(), base->config());
  const auto merged = llama_model::load(test::write_merged_model(scratch / "merged", base_dir, a).string());
  const std::vector<std::vector<std::int32_t>> prompts = {{3, 9, 27, 81, 5, 15, 45}, {2, 4, 8, 16, 32}};

  const auto with_adapter = last_logits(*base, prompts, {true, true}, &a);
  const auto from_merged = last_logits(*merged, prompts, {false, false}, nullptr);
  const auto plain = last_logits(*base, prompts, {false, false}, nullptr);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    BOOST_TEST(max_diff(with_adapter[i], from_merged[i]) < 1e-3, "prompt " << i << ": " << max_diff(with_adapter[i], from_merged[i]));
    BOOST_TEST(max_diff(with_adapter[i], plain[i]) > 1e-2, "prompt " << i << ": the adapter changed nothing");
  }

  // One batch, one adapted sequence and one base: each gets its own.
  const auto mixed = last_logits(*base, prompts, {true, false}, &a);
  BOOST_TEST(max_diff(mixed[0], from_merged[0]) < 1e-3);
  BOOST_TEST(max_diff(mixed[1], plain[1]) < 1e-4);
  fs::remove_all(scratch);
}

BOOST_AUTO_TEST_CASE(adapter_spans_outside_the_batch_are_refused) {
  const auto base = llama_model::load(test::tiny_model_dir());
  lora_adapter a;
  a.layers.resize(std::size_t(base->config().num_hidden_layers));
  const auto& c = base->config();
  kv::kv_cache cache({4, 16, kernels::dtype::f32, false}, c.num_hidden_layers, base->kv_heads(), c.head_dim);
  std::vector<std::int32_t> table{0};
  forward_batch b{{5}, {0}, {table.data()}, {0}, {{0, 2, &a}}};
  forward_workspace ws;
  std::vector<float> logits(std::size_t(c.vocab_size));
  BOOST_CHECK_THROW(base->forward(b, cache, logits.data(), ws, nullptr), std::invalid_argument);
}

namespace {

engine::request greedy(const std::string& id, std::vector<std::int32_t> prompt, const std::string& adapter = "") {
  engine::request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  r.adapter = adapter;
  return r;
}

engine::engine_config with_adapters(int max) {
  engine::engine_config c;
  c.num_blocks = 64;
  c.max_adapters = max;
  return c;
}

}  // namespace

// Through the engine: requests naming the adapter get the merged model's tokens, the others the
// base's, in one batch; two adapters and the base mix; an unloaded adapter is refused to new
// requests; and the prefix cache never gives one adapter's (or the base's) blocks to another.
BOOST_AUTO_TEST_CASE(the_engine_serves_adapters_and_the_base_in_one_batch) {
  const std::string base_dir = test::tiny_model_dir();
  const std::shared_ptr<const llama_model> base = llama_model::load(base_dir);
  const auto dir_a = test::write_lora_adapter(scratch / "engine-a", base->config(), 101);
  const auto dir_b = test::write_lora_adapter(scratch / "engine-b", base->config(), 202);
  const std::shared_ptr<const llama_model> merged_a = llama_model::load(test::write_merged_model(scratch / "merged-a", base_dir, read_lora_adapter(dir_a.string(), base->config())).string());
  const std::shared_ptr<const llama_model> merged_b = llama_model::load(test::write_merged_model(scratch / "merged-b", base_dir, read_lora_adapter(dir_b.string(), base->config())).string());
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    prompts.emplace_back();
    for (int p = 0; p < 20 + 7 * i; ++p) prompts.back().push_back((i * 131 + p * 17 + 5) % base->config().vocab_size);
  }
  auto run = [&](const std::vector<std::string>& adapters_of, engine::engine& e) {
    std::vector<engine::request> reqs;
    for (std::size_t i = 0; i < prompts.size(); ++i) reqs.push_back(greedy("r" + std::to_string(i), prompts[i], adapters_of[i]));
    return engine::generate_all(e, reqs);
  };
  const std::vector<std::string> none(prompts.size());
  auto plain_engine = engine::cpu_engine(base, nullptr, with_adapters(0));
  auto a_engine = engine::cpu_engine(merged_a, nullptr, with_adapters(0));
  auto b_engine = engine::cpu_engine(merged_b, nullptr, with_adapters(0));
  const auto want_base = run(none, plain_engine);
  const auto want_a = run(none, a_engine);
  const auto want_b = run(none, b_engine);

  auto e = engine::cpu_engine(base, nullptr, with_adapters(2));
  const std::string a = engine::load_adapter_folder(e, "a", dir_a.string());
  const std::string b = engine::load_adapter_folder(e, "b", dir_b.string());
  BOOST_TEST(a.rfind("a@", 0) == 0);
  BOOST_TEST(e.adapters().size() == 2u);
  // base, a, b, base, a, b: one batch of three models.
  const std::vector<std::string> mix = {"", a, b, "", a, b};
  const auto got = run(mix, e);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& want = mix[i].empty() ? want_base[i] : mix[i] == a ? want_a[i] : want_b[i];
    BOOST_TEST(got[i] == want, "request " << i << " with adapter '" << mix[i] << "'");
  }
  BOOST_TEST(want_a[1] != want_base[1], "the adapter changed no token");

  // The same prompts again, each under another model than before: no block is found across
  // models, so the prefix cache counts no hit, and each still gets its own model's tokens.
  const auto before = e.kv().stats();
  const std::vector<std::string> shifted = {a, b, "", a, b, ""};
  const auto again = run(shifted, e);
  BOOST_TEST(e.kv().stats().hits == before.hits, "a block of one model was found for another");
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& want = shifted[i].empty() ? want_base[i] : shifted[i] == a ? want_a[i] : want_b[i];
    BOOST_TEST(again[i] == want, "request " << i << " again, with adapter '" << shifted[i] << "'");
  }
  // And under the same model as before, they are found.
  run(mix, e);
  BOOST_TEST(e.kv().stats().hits > before.hits);

  // Loading beyond max_adapters, and a request for an adapter unloaded, are refused by name.
  BOOST_CHECK_THROW(engine::load_adapter_folder(e, "c", dir_a.string()), input_error);
  BOOST_TEST(e.unload_adapter(b));
  BOOST_TEST(!e.unload_adapter(b));
  try {
    e.add_request(greedy("late", prompts[0], b));
    BOOST_FAIL("a request for an unloaded adapter was taken");
  } catch (const input_error& err) {
    BOOST_TEST(std::string(err.what()).find("is not loaded") != std::string::npos, err.what());
  }
  fs::remove_all(scratch);
}

// Unloading while requests run with the adapter: they finish with its weights.
BOOST_AUTO_TEST_CASE(requests_running_with_an_adapter_outlive_its_unload) {
  const std::string base_dir = test::tiny_model_dir();
  const std::shared_ptr<const llama_model> base = llama_model::load(base_dir);
  const auto dir_a = test::write_lora_adapter(scratch / "outlive", base->config(), 303);
  const std::shared_ptr<const llama_model> merged = llama_model::load(test::write_merged_model(scratch / "outlive-merged", base_dir, read_lora_adapter(dir_a.string(), base->config())).string());
  std::vector<std::int32_t> prompt;
  for (int p = 0; p < 30; ++p) prompt.push_back((p * 29 + 3) % base->config().vocab_size);
  auto m = engine::cpu_engine(merged, nullptr, with_adapters(0));
  const auto want = engine::generate_all(m, {greedy("x", prompt)});

  auto e = engine::cpu_engine(base, nullptr, with_adapters(1));
  const std::string a = engine::load_adapter_folder(e, "a", dir_a.string());
  e.add_request(greedy("x", prompt, a));
  std::vector<std::int32_t> got;
  auto take = [&] {
    for (auto& o : e.step()) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
  };
  take();  // the prompt and the first token
  BOOST_TEST(e.unload_adapter(a));
  while (e.has_unfinished()) take();
  BOOST_TEST(got == want[0]);
  fs::remove_all(scratch);
}

