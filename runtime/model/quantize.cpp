#include "runtime/model/quantize.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "runtime/common/error.h"
#include "runtime/model/gguf_llama.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"

namespace troupe::model {

namespace fs = std::filesystem;

bool is_quantized_projection(const std::string& name) {
  static const std::regex re(R"(model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, re);
}

quantize_report quantize_model(const quantize_options& o, const std::function<void(std::size_t, std::size_t)>& progress) {
  if (is_gguf_path(o.in))
    throw input_error(o.in + ": is a GGUF file; model quantize reads a Hugging Face model folder (a GGUF file's tensors "
                             "are already in the formats it chose)");
  model_config cfg = load_model_config(o.in);
  if (cfg.weight_quant)
    throw input_error(o.in + ": already quantized (" + kernels::quant_name(*cfg.weight_quant) + "); quantize the original weights");
  if (cfg.moe) throw input_error(o.in + ": quantized mixture-of-experts models are not supported");
  if (fs::exists(o.out / fs::path("config.json")))
    throw input_error(o.out + ": already holds a model (config.json); choose an empty folder");
  std::vector<std::unique_ptr<safetensors_file>> files;
  for (auto& p : model_safetensors_files(o.in)) files.push_back(std::make_unique<safetensors_file>(p));
  if (files.empty()) throw input_error(o.in + ": no *.safetensors files");
  std::vector<const tensor_info*> tensors;
  for (auto& f : files)
    for (auto& [name, t] : f->tensors()) tensors.push_back(&t);

  const auto q = o.type;
  const bool int8 = q == kernels::quant_type::int8;
  safetensors_writer w;
  quantize_report rep;
  for (auto* t : tensors) {
    if (!is_quantized_projection(t->name)) {
      w.declare_stored(t->name, t->dtype_name, t->shape);
      continue;
    }
    if (t->shape.size() != 2 || t->shape[1] % std::int64_t(kernels::quant_block) != 0)
      throw input_error(t->file + ": tensor '" + t->name + "' is not [n][k] with k a multiple of 32; " + kernels::quant_name(q) +
                        " cannot hold it");
    t->type();  // a float type, else an error naming the tensor
    const auto n = t->shape[0], k = t->shape[1];
    w.declare_stored(t->name, int8 ? "I8" : "U8", {n, std::int64_t(kernels::quant_row_bytes(q, std::size_t(k)))});
    if (int8) w.declare(t->name + "_scale", kernels::dtype::f32, {n});
  }
  fs::create_directories(o.out);
  w.open((fs::path(o.out) / "model.safetensors").string());
  std::vector<float> row;
  std::vector<std::uint8_t> packed;
  std::size_t done = 0;
  for (auto* t : tensors) {
    rep.bytes_in += t->bytes;
    if (!is_quantized_projection(t->name)) {
      w.write(t->data, t->bytes);
      rep.bytes_out += t->bytes;
      ++rep.tensors_copied;
    } else {
      const auto n = std::size_t(t->shape[0]), k = std::size_t(t->shape[1]);
      const std::size_t rb = kernels::quant_row_bytes(q, k);
      std::vector<float> scales(n);
      row.resize(k);
      packed.resize(rb);
      const auto type = t->type();
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < k; ++i) row[i] = kernels::load_as_f32(t->data, type, r * k + i);
        kernels::quantize_row(q, row.data(), k, packed.data(), &scales[r]);
        w.write(packed.data(), rb);
      }
      rep.bytes_out += n * rb;
      if (int8) {
        w.write(scales.data(), n * sizeof(float));
        rep.bytes_out += n * sizeof(float);
      }
      ++rep.tensors_quantized;
    }
    if (progress) progress(++done, tensors.size());
  }
  w.close();

  // config.json says how the projections are stored; the other files come along unchanged.
  cfg.weight_quant = q;
  {
    std::ifstream in(fs::path(o.in) / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", kernels::quant_name(q)}};
    std::ofstream out(fs::path(o.out) / "config.json");
    out << j.dump(2) << "\n";
    if (!out) throw input_error(o.out + ": cannot write config.json");
  }
  for (const auto& e : fs::directory_iterator(o.in)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" || name == "model.safetensors.index.json" ||
        name == "config.json" || name == "metrics.json" || name == "README.md")
      continue;  // the weights were rewritten; the metrics and README describe the original
    fs::copy_file(e.path(), fs::path(o.out) / name, fs::copy_options::overwrite_existing);
  }
  load_model_config(o.out);  // what was written reads back
  return rep;
}

}  // namespace troupe::model
