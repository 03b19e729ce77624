#include <cstdio>

#include "runtime/common/error.h"
#include "runtime/model/synth.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

int cmd_model(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) != "synth") throw input_error("usage: troupe model synth --preset tiny|small|1b|moe --out DIR");
  args a(argc, argv, 3, {"preset", "arch", "dtype", "seed", "out", "rope-scaling"}, {"tied"});
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
  if (!rs.empty() && rs != "llama3") throw input_error("unknown --rope-scaling '" + rs + "' (llama3)");
  o.llama3_rope_scaling = rs == "llama3";
  auto out = a.get("out");
  if (!out) throw input_error("--out DIR is required");
  o.out = *out;
  model::synthesize(o, [](std::size_t d, std::size_t t) { progress_bar("synth", d, t); });
  std::printf("wrote %s (preset %s, arch %s, dtype %s, seed %llu)\n", o.out.c_str(), o.preset.c_str(), o.arch.c_str(),
              dt.c_str(), static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace troupe::cli
