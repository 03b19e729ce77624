#include "runtime/model/quantize.h"

#include <filesystem>
#include <map>
#include <fstream>
#include <memory>
#include <regex>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/model_source.h"

namespace troupe::model {

namespace fs = std::filesystem;

bool is_quantized_projection(const std::string& name) {
  // Phi-3's fused qkv_proj and gate_up_proj too.
  static const std::regex re(R"(model\.layers\.\d+\.(self_attn\.(q|k|v|o|qkv)_proj|mlp\.(gate|up|down|gate_up)_proj)\.weight)");
  return std::regex_match(name, re);
}

namespace {

// How one projection is written: its stored dtype and shape, and in a mix its ggml type.
struct projection_plan {
  std::string dtype_name;  // U8 (blocks) or I8 (int8 rows)
  std::vector<std::int64_t> shape;
  std::uint32_t ggml_type = 0;  // in a mix: the row format gguf_mix_type chose
};

projection_plan plan_projection(const quantize_options& o, const model_config& cfg, const tensor_info& t) {
  const std::string format = o.mix.empty() ? kernels::quant_name(o.type) : o.mix;
  if (t.shape.size() != 2 || t.shape[1] % std::int64_t(kernels::quant_block) != 0)
    throw input_error(t.file + ": tensor '" + t.name + "' is not [n][k] with k a multiple of 32; " + format + " cannot hold it");
  t.type();  // a float type, else an error naming the tensor
  const auto n = t.shape[0], k = t.shape[1];
  if (!o.mix.empty()) {
    const std::uint32_t type = gguf_mix_type(o.mix, *gguf_tensor_name(t.name), cfg.num_hidden_layers, k);
    return {"U8", {n, std::int64_t(ggml_row_bytes(type, std::size_t(k)))}, type};
  }
  const bool int8 = o.type == kernels::quant_type::int8;
  return {int8 ? "I8" : "U8", {n, std::int64_t(kernels::quant_row_bytes(o.type, std::size_t(k)))}};
}

// Writes one projection's rows (and an int8 model's row scales); returns the bytes written.
std::size_t write_projection(const quantize_options& o, const tensor_info& t, const projection_plan& plan, safetensors_writer& w) {
  const auto n = std::size_t(t.shape[0]), k = std::size_t(t.shape[1]), rb = std::size_t(plan.shape[1]);
  const std::vector<float> x = t.to_f32();
  std::vector<std::uint8_t> packed(n * rb);
  std::vector<float> scales(n);
  kernels::parallel_for(n, [&](std::size_t r) {
    if (!o.mix.empty()) quantize_ggml_row(plan.ggml_type, &x[r * k], k, &packed[r * rb]);
    else kernels::quantize_row(o.type, &x[r * k], k, &packed[r * rb], &scales[r]);
  });
  w.write(packed.data(), packed.size());
  if (o.mix.empty() && o.type == kernels::quant_type::int8) {
    w.write(scales.data(), n * sizeof(float));
    return packed.size() + n * sizeof(float);
  }
  return packed.size();
}

}  // namespace

quantize_report quantize_model(const quantize_options& o, const std::function<void(std::size_t, std::size_t)>& progress) {
  if (is_gguf_path(o.in))
    throw input_error(o.in + ": is a GGUF file; model quantize reads a Hugging Face model folder (a GGUF file's tensors "
                             "are already in the formats it chose)");
  model_config cfg = load_model_config(o.in);
  if (cfg.weight_quant || !cfg.weight_mix.empty())
    throw input_error(o.in + ": already quantized (" + (cfg.weight_quant ? kernels::quant_name(*cfg.weight_quant) : cfg.weight_mix) +
                      "); quantize the original weights");
  if (cfg.moe)
    throw input_error(o.in + ": a quantized folder of a mixture-of-experts model is not supported; write its GGUF file instead "
                             "(--out FILE.gguf)");
  if (!o.mix.empty()) gguf_mix_type(o.mix, "output.weight", 1, 256);  // an unknown mix is an error naming the known ones
  if (fs::exists(o.out / fs::path("config.json")))
    throw input_error(o.out + ": already holds a model (config.json); choose an empty folder");
  std::vector<std::unique_ptr<safetensors_file>> files;
  for (auto& p : model_safetensors_files(o.in)) files.push_back(std::make_unique<safetensors_file>(p));
  if (files.empty()) throw input_error(o.in + ": no *.safetensors files");
  std::vector<const tensor_info*> tensors;
  for (auto& f : files)
    for (auto& [name, t] : f->tensors()) tensors.push_back(&t);

  safetensors_writer w;
  std::map<std::string, projection_plan> plans;
  for (auto* t : tensors) {
    if (!is_quantized_projection(t->name)) {
      w.declare_stored(t->name, t->dtype_name, t->shape);
      continue;
    }
    const auto& plan = plans[t->name] = plan_projection(o, cfg, *t);
    w.declare_stored(t->name, plan.dtype_name, plan.shape);
    if (o.mix.empty() && o.type == kernels::quant_type::int8) w.declare(t->name + "_scale", kernels::dtype::f32, {plan.shape[0]});
    if (!o.mix.empty()) w.metadata(format_metadata_key(t->name), ggml_format_name(plan.ggml_type));
  }
  fs::create_directories(o.out);
  w.open((fs::path(o.out) / "model.safetensors").string());
  quantize_report rep;
  std::size_t done = 0;
  for (auto* t : tensors) {
    rep.bytes_in += t->bytes;
    if (!is_quantized_projection(t->name)) {
      w.write(t->data, t->bytes);
      rep.bytes_out += t->bytes;
      ++rep.tensors_copied;
    } else {
      rep.bytes_out += write_projection(o, *t, plans.at(t->name), w);
      ++rep.tensors_quantized;
    }
    if (progress) progress(++done, tensors.size());
  }
  w.close();

  // config.json says how the projections are stored; the other files come along unchanged.
  {
    std::ifstream in(fs::path(o.in) / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", o.mix.empty() ? kernels::quant_name(o.type) : o.mix}};
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
