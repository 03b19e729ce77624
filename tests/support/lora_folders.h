// LoRA adapters written by a test: random low-rank matrices on every projection in PEFT's folder
// layout, and the base model's folder with one merged into its weights (what serving the adapter
// must equal). Shared by the forward, engine and serving tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/lora.h"
#include "runtime/model/safetensors.h"

namespace troupe::test {

inline std::vector<float> lora_values(std::size_t n, std::uint32_t seed, float range) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// An adapter of rank 4 (lora_alpha 8) on every projection of every layer of a model shaped `c`,
// written to `dir`; `seed` picks its matrices.
inline std::filesystem::path write_lora_adapter(const std::filesystem::path& dir, const model::model_config& c, std::uint32_t seed = 11) {
  static const char* const modules[][2] = {{"self_attn", "q_proj"}, {"self_attn", "k_proj"}, {"self_attn", "v_proj"},
                                           {"self_attn", "o_proj"}, {"mlp", "gate_proj"},    {"mlp", "up_proj"},
                                           {"mlp", "down_proj"}};
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "adapter_config.json")
      << nlohmann::json{{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"bias", "none"}}.dump();
  model::safetensors_writer w;
  std::vector<std::vector<float>> data;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const auto& m : modules) {
      const std::string name = "base_model.model.model.layers." + std::to_string(l) + "." + m[0] + "." + m[1];
      const std::string t = m[1];
      const int in = t == "o_proj" ? c.q_dim() : t == "down_proj" ? c.intermediate_size : c.hidden_size;
      const int out = t == "q_proj"                       ? c.q_dim()
                      : (t == "k_proj" || t == "v_proj")   ? c.kv_dim()
                      : (t == "gate_proj" || t == "up_proj") ? c.intermediate_size
                                                           : c.hidden_size;
      w.declare(name + ".lora_A.weight", kernels::dtype::f32, {4, in});
      w.declare(name + ".lora_B.weight", kernels::dtype::f32, {out, 4});
      data.push_back(lora_values(std::size_t(4 * in), seed++, 0.1f));
      data.push_back(lora_values(std::size_t(out * 4), seed++, 0.1f));
    }
  w.open((dir / "adapter_model.safetensors").string());
  for (const auto& d : data) w.write(d.data(), d.size() * sizeof(float));
  w.close();
  return dir;
}

// The base folder `base_dir` copied to `dir` with adapter `a` merged into each adapted projection.
inline std::filesystem::path write_merged_model(const std::filesystem::path& dir, const std::string& base_dir, const model::lora_adapter& a) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(base_dir))
    if (e.path().extension() != ".safetensors") fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  model::safetensors_file base((fs::path(base_dir) / "model.safetensors").string());
  model::safetensors_writer w;
  std::vector<std::vector<float>> data;
  for (const auto& [name, t] : base.tensors()) {
    std::vector<float> v = t.to_f32();
    for (std::size_t l = 0; l < a.layers.size(); ++l)
      for (const auto& [target, m] : a.layers[l]) {
        const bool attn = target == model::lora_target::q_proj || target == model::lora_target::k_proj ||
                          target == model::lora_target::v_proj || target == model::lora_target::o_proj;
        if (name == "model.layers." + std::to_string(l) + (attn ? ".self_attn." : ".mlp.") + model::lora_target_name(target) + ".weight")
          model::merge_lora(m, v.data());
      }
    w.declare(name, kernels::dtype::f32, t.shape);
    data.push_back(std::move(v));
  }
  w.open((dir / "model.safetensors").string());
  for (const auto& d : data) w.write(d.data(), d.size() * sizeof(float));
  w.close();
  return dir;
}

}  // namespace troupe::test
