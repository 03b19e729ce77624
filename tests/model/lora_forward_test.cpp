// A LoRA adapter applied in the forward, beside the base weights: its logits are those of the
// base model with the adapter merged into its weights (a folder this test writes), and in a
// batch that mixes it with the base each sequence gets its own: the adapted rows the adapter's,
// the others the base's.
#define BOOST_TEST_MODULE lora_forward
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/model/lora.h"
#include "runtime/model/safetensors.h"
#include "tests/support/models.h"

using namespace troupe;
using namespace troupe::model;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-lora-forward-" + std::to_string(::getpid()));

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float range) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

const char* const modules[][2] = {{"self_attn", "q_proj"}, {"self_attn", "k_proj"}, {"self_attn", "v_proj"}, {"self_attn", "o_proj"},
                                  {"mlp", "gate_proj"},    {"mlp", "up_proj"},      {"mlp", "down_proj"}};

// An adapter of rank 4 on every projection of every layer, in PEFT's layout.
fs::path write_adapter(const model_config& c) {
  const fs::path dir = scratch / "adapter";
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << nlohmann::json{{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"bias", "none"}}.dump();
  safetensors_writer w;
  std::vector<std::vector<float>> data;
  std::uint32_t seed = 11;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const auto& m : modules) {
      lora_matrix probe;
      const std::string name = "base_model.model.model.layers." + std::to_string(l) + "." + m[0] + "." + m[1];
      const std::string t = m[1];
      const int in = t == "o_proj" ? c.q_dim() : t == "down_proj" ? c.intermediate_size : c.hidden_size;
      const int out = t == "q_proj" ? c.q_dim() : (t == "k_proj" || t == "v_proj") ? c.kv_dim() : (t == "gate_proj" || t == "up_proj") ? c.intermediate_size : c.hidden_size;
      w.declare(name + ".lora_A.weight", kernels::dtype::f32, {4, in});
      w.declare(name + ".lora_B.weight", kernels::dtype::f32, {out, 4});
      data.push_back(random_values(std::size_t(4 * in), seed++, 0.1f));
      data.push_back(random_values(std::size_t(out * 4), seed++, 0.1f));
    }
  w.open((dir / "adapter_model.safetensors").string());
  for (const auto& d : data) w.write(d.data(), d.size() * sizeof(float));
  w.close();
  return dir;
}

// The base folder with the adapter merged into each adapted projection.
fs::path write_merged(const std::string& base_dir, const lora_adapter& a) {
  const fs::path dir = scratch / "merged";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(base_dir))
    if (e.path().extension() != ".safetensors") fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  safetensors_file base((fs::path(base_dir) / "model.safetensors").string());
  safetensors_writer w;
  std::vector<std::vector<float>> data;
  for (const auto& [name, t] : base.tensors()) {
    std::vector<float> v = t.to_f32();
    for (std::size_t l = 0; l < a.layers.size(); ++l)
      for (const auto& [target, m] : a.layers[l]) {
        const bool attn = target == lora_target::q_proj || target == lora_target::k_proj || target == lora_target::v_proj ||
                          target == lora_target::o_proj;
        if (name == "model.layers." + std::to_string(l) + (attn ? ".self_attn." : ".mlp.") + lora_target_name(target) + ".weight")
          merge_lora(m, v.data());
      }
    w.declare(name, kernels::dtype::f32, t.shape);
    data.push_back(std::move(v));
  }
  w.open((dir / "model.safetensors").string());
  for (const auto& d : data) w.write(d.data(), d.size() * sizeof(float));
  w.close();
  return dir;
}

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
  const lora_adapter a = read_lora_adapter(write_adapter(base->config()).string(), base->config());
  const auto merged = llama_model::load(write_merged(base_dir, a).string());
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
