// troupe eval perplexity: the quality gate (runtime/eval/perplexity.h) from the command line.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/eval/perplexity.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"

namespace troupe::cli {

int cmd_eval_perplexity(const args& a) {
  apply_log_flags(a);
  const auto text_path = a.get("text");
  if (!text_path) throw input_error("--text FILE is required: the text to score");
  const std::string dir = a.get("model", default_model_dir());
  std::ifstream in(*text_path, std::ios::binary);
  if (!in) throw input_error("--text: cannot read " + *text_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto m = open_model(dir);
  if (!m.tok) throw input_error("--model: " + dir + " has no tokenizer.json, so its text cannot be scored");
  const auto ids = m.tok->encode(ss.str(), true);
  eval::perplexity_config cfg;
  cfg.window = int(a.get_int("window", 0));
  cfg.chunk = int(a.get_int("chunk", 256));
  if (cfg.window < 0) throw input_error("--window must be positive (0: the model's context)");
  if (cfg.chunk < 1) throw input_error("--chunk must be at least 1");
  cfg.kv_type = parse_kv_dtype(a.get("kv-dtype", "f32"));
  const auto r = eval::perplexity(*m.model, ids, cfg);
  if (a.has("json")) {
    nlohmann::json j{{"model", dir},         {"text", *text_path},      {"tokens", r.tokens},
                     {"windows", r.windows}, {"window", r.window},      {"mean_nll", r.mean_nll()}, {"kv_dtype", kernels::dtype_name(cfg.kv_type)},
                     {"perplexity", r.perplexity()}, {"seconds", r.seconds}, {"tokens_per_second", r.seconds > 0 ? double(r.tokens) / r.seconds : 0.0}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("perplexity %.4f (mean NLL %.5f nats) over %zu tokens in %zu window(s) of %d, %.1f s\n", r.perplexity(), r.mean_nll(),
              r.tokens, r.windows, r.window, r.seconds);
  return 0;
}

}  // namespace troupe::cli
