// A LoRA adapter in PEFT's folder layout, made here with random low-rank matrices: read with
// its scale, its share of a projection equal to the adapter merged into the weight, and every
// feature the server does not honour refused by name.
#define BOOST_TEST_MODULE lora
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/model/lora.h"
#include "runtime/model/safetensors.h"

using namespace troupe;
using namespace troupe::model;
namespace fs = std::filesystem;

namespace {

model_config small() {
  model_config c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 64;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  return c;
}

struct matrix {
  std::string name;
  std::vector<std::int64_t> shape;
};

std::vector<float> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// A PEFT folder: adapter_config.json with `config`, and the tensors named, random f32.
fs::path adapter(const std::string& tag, const nlohmann::json& config, const std::vector<matrix>& tensors) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-lora-" + std::to_string(::getpid()) + "-" + tag);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << config.dump();
  safetensors_writer w;
  for (const auto& t : tensors) w.declare(t.name, kernels::dtype::f32, t.shape);
  w.open((dir / "adapter_model.safetensors").string());
  std::uint32_t seed = 1;
  for (const auto& t : tensors) {
    const auto v = random_values(std::size_t(t.shape[0] * t.shape[1]), seed++);
    w.write(v.data(), v.size() * sizeof(float));
  }
  w.close();
  return dir;
}

std::string prefix(int layer, const char* block, const char* module) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + block + "." + module;
}

// q_proj and down_proj of both layers, rank 2.
std::vector<matrix> usual() {
  std::vector<matrix> out;
  for (int l = 0; l < 2; ++l) {
    out.push_back({prefix(l, "self_attn", "q_proj") + ".lora_A.weight", {2, 8}});
    out.push_back({prefix(l, "self_attn", "q_proj") + ".lora_B.weight", {8, 2}});
    out.push_back({prefix(l, "mlp", "down_proj") + ".lora_A.weight", {2, 12}});
    out.push_back({prefix(l, "mlp", "down_proj") + ".lora_B.weight", {8, 2}});
  }
  return out;
}

const nlohmann::json usual_config = {{"peft_type", "LORA"}, {"r", 2}, {"lora_alpha", 4}, {"lora_dropout", 0.05},
                                     {"target_modules", {"q_proj", "down_proj"}}, {"bias", "none"},
                                     {"base_model_name_or_path", "kjv"}, {"task_type", "CAUSAL_LM"}};

std::string refusal(const std::string& tag, const nlohmann::json& config, const std::vector<matrix>& tensors) {
  const auto dir = adapter(tag, config, tensors);
  try {
    read_lora_adapter(dir.string(), small());
  } catch (const input_error& e) {
    fs::remove_all(dir);
    return e.what();
  }
  fs::remove_all(dir);
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_adapter_is_read_with_its_scale) {
  const auto dir = adapter("read", usual_config, usual());
  const lora_adapter a = read_lora_adapter(dir.string(), small());
  BOOST_TEST(a.rank == 2);
  BOOST_TEST(a.base_model == "kjv");
  BOOST_TEST(a.num_matrices() == 4u);
  const lora_matrix& q = a.layers[1].at(lora_target::q_proj);
  BOOST_TEST(q.in == 8);
  BOOST_TEST(q.out == 8);  // two heads of 4
  BOOST_TEST(q.scale == 2.0);  // lora_alpha / r
  BOOST_TEST(a.layers[0].at(lora_target::down_proj).in == 12);
  BOOST_TEST(a.bytes() == 2 * (16 + 16 + 24 + 16) * sizeof(float));
  fs::remove_all(dir);

  nlohmann::json rs = usual_config;
  rs["use_rslora"] = true;
  const auto rdir = adapter("rslora", rs, usual());
  BOOST_TEST(read_lora_adapter(rdir.string(), small()).layers[0].at(lora_target::q_proj).scale == 4 / std::sqrt(2.0));
  fs::remove_all(rdir);
}

BOOST_AUTO_TEST_CASE(its_share_of_a_projection_is_the_merged_weight_s) {
  const auto dir = adapter("apply", usual_config, usual());
  const lora_matrix m = read_lora_adapter(dir.string(), small()).layers[0].at(lora_target::down_proj);
  fs::remove_all(dir);
  const std::size_t rows = 3, in = std::size_t(m.in), out = std::size_t(m.out);
  const std::vector<float> w = random_values(out * in, 99), x = random_values(rows * in, 7);
  std::vector<float> merged = w;
  merge_lora(m, merged.data());
  BOOST_TEST((merged != w));  // the adapter changes the projection
  auto times = [&](const std::vector<float>& weight) {  // x W^T
    std::vector<float> y(rows * out, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < out; ++j)
        for (std::size_t i = 0; i < in; ++i) y[r * out + j] += weight[j * in + i] * x[r * in + i];
    return y;
  };
  std::vector<float> y = times(w);
  apply_lora(m, x.data(), rows, y.data());  // W x + scale B A x
  const std::vector<float> expected = times(merged);
  for (std::size_t i = 0; i < y.size(); ++i) BOOST_TEST(y[i] == expected[i], boost::test_tools::tolerance(1e-4f));

  // Into a slice of wider rows (a fused projection's): the rest of each row untouched.
  const std::size_t stride = out + 5;
  std::vector<float> delta(rows * out, 0.0f), wide(rows * stride, 1.0f);
  apply_lora(m, x.data(), rows, delta.data());
  apply_lora(m, x.data(), rows, wide.data() + 5, stride);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < 5; ++j) BOOST_TEST(wide[r * stride + j] == 1.0f);
    for (std::size_t j = 0; j < out; ++j)
      BOOST_TEST(wide[r * stride + 5 + j] == 1.0f + delta[r * out + j], boost::test_tools::tolerance(1e-5f));
  }
}

BOOST_AUTO_TEST_CASE(what_is_not_honoured_is_refused_by_name) {
  auto with = [](const char* key, nlohmann::json v) {
    nlohmann::json c = usual_config;
    c[key] = v;
    return c;
  };
  BOOST_TEST(refusal("dora", with("use_dora", true), usual()).find("use_dora") != std::string::npos);
  BOOST_TEST(refusal("bias", with("bias", "all"), usual()).find("bias") != std::string::npos);
  BOOST_TEST(refusal("save", with("modules_to_save", {"lm_head"}), usual()).find("modules_to_save") != std::string::npos);
  BOOST_TEST(refusal("fifo", with("fan_in_fan_out", true), usual()).find("fan_in_fan_out") != std::string::npos);
  BOOST_TEST(refusal("alpha", with("alpha_pattern", {{"q_proj", 8}}), usual()).find("alpha_pattern") != std::string::npos);
  BOOST_TEST(refusal("prefix", with("peft_type", "PREFIX_TUNING"), usual()).find("peft_type") != std::string::npos);
  BOOST_TEST(refusal("r", with("r", 0), usual()).find("r: expected a positive integer") != std::string::npos);
  // An r that disagrees with the matrices' rank was served with the wrong scale, silently.
  BOOST_TEST(refusal("rank", with("r", 4), usual()).find("have rank 2, but adapter_config.json says r = 4") != std::string::npos);
  // rank_pattern gives a module its own rank, matched as PEFT matches it (the name's end).
  BOOST_TEST(refusal("ranks", with("rank_pattern", {{"q_proj", 4}}), usual()).find("q_proj: its matrices have rank 2, but adapter_config.json says r = 4") != std::string::npos);
  BOOST_TEST(refusal("pattern", with("rank_pattern", {{"layers.1.mlp.down_proj", 4}}), usual()).find("layer 1 down_proj") != std::string::npos);
  BOOST_TEST(refusal("matching", with("rank_pattern", {{"v_proj", 4}}), usual()).empty());

  auto tensors = usual();
  tensors.push_back({"base_model.model.lm_head.lora_A.weight", {2, 8}});
  BOOST_TEST(refusal("head", usual_config, tensors).find("lm_head") != std::string::npos);
  tensors = usual();
  tensors[0].shape = {2, 9};  // q_proj takes 8
  BOOST_TEST(refusal("shape", usual_config, tensors).find("takes 8") != std::string::npos);
  tensors = usual();
  tensors.pop_back();  // layer 1's down_proj lora_B
  BOOST_TEST(refusal("partner", usual_config, tensors).find("without its lora_B") != std::string::npos);
  tensors = usual();
  tensors.push_back({prefix(5, "self_attn", "v_proj") + ".lora_A.weight", {2, 8}});
  BOOST_TEST(refusal("layer", usual_config, tensors).find("layer 5") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_folder_without_an_adapter_says_what_is_missing) {
  const fs::path dir = fs::temp_directory_path() / ("troupe-lora-empty-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  try {
    read_lora_adapter(dir.string(), small());
    BOOST_FAIL("an empty folder was read as an adapter");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("adapter_config.json") != std::string::npos);
  }
  fs::remove_all(dir);
}

// An adapter_model.safetensors that was a symlink to /dev/zero grew the server to 22 GB until
// the kernel killed it, and a FIFO would block the replica reading it: only regular files of a
// size known before reading are read, and the rest are refused at once, by what they are.
BOOST_AUTO_TEST_CASE(an_adapter_file_that_is_a_device_or_a_fifo_is_refused_before_it_is_read) {
  const auto dir = adapter("device", usual_config, usual());
  const fs::path weights = dir / "adapter_model.safetensors";
  auto refused = [&]() -> std::string {
    try {
      read_lora_adapter(dir.string(), small());
    } catch (const input_error& e) {
      return e.what();
    }
    return "";
  };
  fs::remove(weights);
  fs::create_symlink("/dev/zero", weights);
  BOOST_TEST(refused().find("adapter_model.safetensors: is not a regular file (a device)") != std::string::npos, refused());
  fs::remove(weights);
  BOOST_TEST_REQUIRE(::mkfifo(weights.c_str(), 0600) == 0);
  BOOST_TEST(refused().find("is not a regular file (a FIFO)") != std::string::npos, refused());
  fs::remove(dir / "adapter_config.json");
  fs::create_symlink("/dev/zero", dir / "adapter_config.json");
  BOOST_TEST(refused().find("adapter_config.json: is not a regular file (a device)") != std::string::npos, refused());
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(replicas_in_one_process_share_one_read_of_an_adapter) {
  const auto dir = adapter("shared", usual_config, usual());
  auto first = shared_lora_adapter(dir.string(), small());
  auto second = shared_lora_adapter(dir.string(), small());
  BOOST_TEST(first.get() == second.get());
  BOOST_TEST(first->fingerprint == lora_fingerprint(dir.string()));
  // Another base shape is another adapter (its matrices were checked against that shape).
  model_config deeper = small();
  deeper.num_hidden_layers = 3;
  auto other = shared_lora_adapter(dir.string(), deeper);
  BOOST_TEST(other.get() != first.get());
  // Changed files are read again, under their new fingerprint.
  const std::weak_ptr<const lora_adapter> old = first;
  first.reset();
  second.reset();
  BOOST_TEST(old.expired());  // nothing but its holders kept it
  std::ofstream(dir / "adapter_config.json", std::ios::app) << " ";
  auto changed = shared_lora_adapter(dir.string(), small());
  BOOST_TEST(changed->fingerprint != other->fingerprint);
  fs::remove_all(dir);
}
