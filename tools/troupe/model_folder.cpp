#include "tools/troupe/model_folder.h"

#include "runtime/model/gguf_import.h"
#include "runtime/model/model_tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <system_error>
#include <filesystem>
#include <optional>

#include "runtime/model/safetensors.h"
#include "runtime/common/error.h"
#include "runtime/model/synth.h"
#include "tools/troupe/args.h"

namespace troupe::cli {

std::string default_model_dir() { return "models/kjv"; }

topology::topology_config load_config(const std::string& path) {
  if (path == "configs/local.toml" && !std::filesystem::exists(path))
    return topology::parse_topology(std::string(embedded_default_config()), "configs/local.toml (built in)");
  return topology::load_topology(path);
}

namespace {

// The folders the shipped configs name that are synthesized on first use: the random `small`
// model of the test and benchmark configs, and the mixture-of-experts one of configs/ep2.toml.
// (The default model, models/kjv, is trained and committed: tools/train/train_kjv.py.)
std::optional<model::synth_options> synthesized_default(const std::string& dir) {
  // However it is spelled (./models/small, models/small/): the folder under the current directory.
  std::string name = std::filesystem::path(dir).lexically_normal().generic_string();
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  model::synth_options o;
  o.out = dir;
  if (name == "models/small") return o;
  if (name == "models/moe") {
    o.preset = "moe";
    o.arch = "mixtral";
    return o;
  }
  return std::nullopt;
}

}  // namespace

void ensure_model(const std::string& dir) {
  namespace fs = std::filesystem;
  auto o = synthesized_default(dir);
  if (!o || (fs::exists(dir + "/model.safetensors") && fs::exists(dir + "/config.json"))) return;
  std::fprintf(stderr, "troupe: %s not found; synthesizing it (preset %s, arch %s, f32, seed 0)\n", dir.c_str(), o->preset.c_str(),
               o->arch.c_str());
  // Written aside and renamed into place: the processes of one launch may all get here at once,
  // and none may read a half-written folder.
  std::string final_dir = fs::path(dir).lexically_normal().generic_string();
  while (final_dir.size() > 1 && final_dir.back() == '/') final_dir.pop_back();
  const fs::path target(final_dir);
  o->out = (target.parent_path() / (".synth-" + target.filename().string() + "-" + std::to_string(::getpid()))).generic_string();
  model::synthesize(*o, [](std::size_t d, std::size_t t) { progress_bar("synth", d, t); });
  std::error_code ec;
  fs::rename(o->out, target, ec);
  if (ec) {  // another process won the race (its folder is whole), or a stale partial folder is there
    fs::remove_all(o->out, ec);
    if (!fs::exists(dir + "/model.safetensors")) throw input_error(dir + ": cannot synthesize it there (a partial folder?)");
  }
}

opened_model open_model(const std::string& dir) {
  namespace fs = std::filesystem;
  ensure_model(dir);
  opened_model m;
  std::uintmax_t bytes = 0;
  std::error_code ec;
  if (model::is_gguf_path(dir))
    bytes = fs::file_size(dir, ec);
  else if (fs::is_directory(dir, ec))
    for (const auto& f : model::model_safetensors_files(dir)) bytes += fs::file_size(f, ec);
  std::fprintf(stderr, "troupe: loading model %s (%.2f GB of weights)\n", dir.c_str(), double(bytes) / 1e9);
  m.model = model::llama_model::load(dir, [](int done, int layers) { progress_bar("loading layers", std::size_t(done), std::size_t(layers), "layers"); });
  m.tok = load_tokenizer(dir);
  return m;
}

std::shared_ptr<const tokenizer::tokenizer> load_tokenizer(const std::string& model) { return model::load_tokenizer(model); }

std::optional<chat::chat_template> load_chat_template(const std::string& model, const std::string& override_file) {
  if (!model::is_gguf_path(model) || !override_file.empty())
    return chat::chat_template::load(model::is_gguf_path(model) ? "" : model, override_file);
  const model::gguf_file g(model);
  const auto& m = g.metadata();
  auto t = m.find("tokenizer.chat_template");
  if (t == m.end() || !t->is_string()) return std::nullopt;
  // The template's bos_token and eos_token are the texts of the ids the file names.
  auto token = [&](const char* key) {
    auto id = m.find(key);
    auto tokens = m.find("tokenizer.ggml.tokens");
    if (id == m.end() || tokens == m.end() || !id->is_number_integer() || id->get<std::size_t>() >= tokens->size()) return std::string();
    return (*tokens)[id->get<std::size_t>()].get<std::string>();
  };
  return chat::chat_template(t->get<std::string>(), token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id"));
}

kernels::dtype parse_kv_dtype(const std::string& name) {
  if (auto t = kernels::parse_dtype(name)) return *t;
  throw input_error("unknown --kv-dtype '" + name + "' (f32, f16, bf16, int8)");
}

}  // namespace troupe::cli
