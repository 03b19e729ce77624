// Finding and opening the model folder a command works on.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/chat/chat_template.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "topology/topology.h"

namespace troupe::cli {

// models/kjv under the current directory: the default model, trained on the King James Bible
// and committed (models/kjv/README.md).
std::string default_model_dir();

// configs/local.toml as it was built in (tools/CMakeLists.txt compiles it into the binary).
std::string_view embedded_default_config();

// The topology at `path`; the default one (configs/local.toml) from the copy built in when the
// file is not there (troupe run outside a checkout). Throws input_error as load_topology does.
topology::topology_config load_config(const std::string& path);

struct opened_model {
  std::shared_ptr<const model::llama_model> model;
  std::shared_ptr<const tokenizer::tokenizer> tok;  // null when the folder has no tokenizer.json
};

// A model's tokenizer: the folder's tokenizer.json, or the one in a GGUF file's metadata; null
// when there is none.
std::shared_ptr<const tokenizer::tokenizer> load_tokenizer(const std::string& model);

// A model's chat template: `override_file` when given, else the folder's (chat_template.jinja,
// tokenizer_config.json) or a GGUF file's tokenizer.chat_template; nullopt when there is none.
std::optional<chat::chat_template> load_chat_template(const std::string& model, const std::string& override_file = "");

// models/small and models/moe (the random models the test and benchmark configs name, however
// the path is spelled) are synthesized when missing, atomically: concurrent callers (the
// processes of one launch) all end with the same whole folder. Any other path is left alone.
void ensure_model(const std::string& dir);

// Loads the folder (or a llama .gguf file); when it is models/small or models/moe (the random models the test and
// benchmark configs name) and missing, synthesizes it first (with a progress bar). Throws input_error for anything wrong with the folder.
opened_model open_model(const std::string& dir);

// The KV cache type a --kv-dtype flag names; throws input_error listing the known ones.
kernels::dtype parse_kv_dtype(const std::string& name);

}  // namespace troupe::cli
