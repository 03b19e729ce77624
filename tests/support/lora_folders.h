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
#include "runtime/model/synth.h"

namespace troupe::test {

// An adapter of rank 4 (lora_alpha 8) on every projection of every layer of a model shaped `c`,
// written to `dir`; `seed` picks its matrices (model::synthesize_lora).
inline std::filesystem::path write_lora_adapter(const std::filesystem::path& dir, const model::model_config& c, std::uint32_t seed = 11) {
  model::synthesize_lora(c, dir.string(), 4, seed);
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
