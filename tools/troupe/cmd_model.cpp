#include <algorithm>
#include <cstdio>

#include "runtime/common/error.h"
#include "runtime/model/gguf_export.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/model_source.h"
#include "runtime/model/quantize.h"
#include "runtime/model/synth.h"
#include "tools/troupe/model_folder.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

bool ends_with_gguf(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0; }

int quantize_to_gguf(const args& a, const std::string& mix, const std::string& out) {
  model::gguf_export_options o;
  o.in = a.get("model", default_model_dir());
  o.out = out;
  o.mix = mix;
  const auto r = model::export_gguf(o, [](std::size_t d, std::size_t t) { progress_bar("quantize", d, t, "tensors"); });
  std::printf("wrote %s (%s): %zu tensors quantized, %zu kept in F32, %.1f MB from %.1f MB\n", o.out.c_str(), mix.c_str(),
              r.tensors_quantized, r.tensors_copied, double(r.bytes_out) / 1e6, double(r.bytes_in) / 1e6);
  return 0;
}

}  // namespace

int cmd_model_quantize(const args& a) {
  const auto type = a.get("type");
  if (!type) throw input_error("--type is required (q8_0, q4_0, int8, or a mix such as q4_k_m)");
  const auto out = a.get("out");
  if (!out) throw input_error("--out DIR or FILE.gguf is required");
  if (ends_with_gguf(*out)) {
    if (*type == "int8") throw input_error("--type int8 has no GGUF type; a .gguf file takes q8_0, q4_0 or a K-quant mix");
    return quantize_to_gguf(a, *type, *out);
  }
  const auto parsed = kernels::parse_quant_type(*type);
  const auto& mixes = model::gguf_mixes();
  if (!parsed && std::find(mixes.begin(), mixes.end(), *type) == mixes.end())
    throw input_error("unknown --type '" + *type + "' (q8_0, q4_0, int8, or a mix: q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k, iq4_xs)");
  model::quantize_options o;
  o.in = a.get("model", default_model_dir());
  o.out = *out;
  if (parsed) o.type = *parsed;
  else o.mix = *type;
  const auto r = model::quantize_model(o, [](std::size_t d, std::size_t t) { progress_bar("quantize", d, t, "tensors"); });
  std::printf("wrote %s (%s): %zu projections quantized, %zu tensors copied, %.1f MB of tensors from %.1f MB\n", o.out.c_str(),
              type->c_str(), r.tensors_quantized, r.tensors_copied, double(r.bytes_out) / 1e6, double(r.bytes_in) / 1e6);
  return 0;
}

int cmd_model_synth(const args& a) {
  model::synth_options o;
  o.preset = a.get("preset", "small");
  o.arch = a.get("arch", "llama");
  const std::string dt = a.get("dtype", "f32");
  if (dt == "f32") o.type = kernels::dtype::f32;
  else if (dt == "f16") o.type = kernels::dtype::f16;
  else if (dt == "bf16") o.type = kernels::dtype::bf16;
  else throw input_error("unknown --dtype '" + dt + "' (f32, f16, bf16)");
  o.seed = std::uint64_t(a.get_int("seed", 0));
  o.tied_embeddings = a.has("tied");
  const std::string rs = a.get("rope-scaling", "");
  o.llama3_rope_scaling = rs == "llama3";
  o.rope_scaling = rs;  // linear, yarn and dynamic; anything else is refused by the synthesizer
  o.head_dim = int(a.get_int("head-dim", 0));
  o.partial_rotary = a.get_double("partial-rotary", 0.0);
  o.sliding_window = int(a.get_int("sliding-window", 0));
  o.vocab_size = int(a.get_int("vocab", 0));
  if (o.vocab_size < 0 || o.vocab_size > 1 << 20) throw input_error("--vocab must be 1 to 1048576 tokens");
  o.layers = int(a.get_int("layers", 0));
  auto out = a.get("out");
  if (!out) throw input_error("--out DIR is required");
  o.out = *out;
  model::synthesize(o, [](std::size_t d, std::size_t t) { progress_bar("synth", d, t); });
  std::printf("wrote %s (preset %s, arch %s, dtype %s, seed %llu)\n", o.out.c_str(), o.preset.c_str(), o.arch.c_str(),
              dt.c_str(), static_cast<unsigned long long>(o.seed));
  return 0;
}

int cmd_model_synth_lora(const args& a) {
  const auto base = a.get("base");
  const auto out = a.get("out");
  if (!base || !out) throw input_error("--base MODEL and --out DIR are required");
  const int rank = int(a.get_int("rank", 4));
  const auto seed = std::uint32_t(a.get_int("seed", 11));
  model::synthesize_lora(model::load_model_config(*base), *out, rank, seed);
  std::printf("wrote %s: a rank-%d LoRA adapter with random matrices on every projection of %s\n", out->c_str(), rank, base->c_str());
  return 0;
}

}  // namespace troupe::cli
