// Finding and opening the model folder a command works on.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "runtime/chat/chat_template.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::cli {

// models/kjv under the current directory: the default model, trained on the King James Bible
// and committed (models/kjv/README.md).
std::string default_model_dir();

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

// Loads the folder (or a llama .gguf file); when it is models/small or models/moe (the random models the test and
// benchmark configs name) and missing, synthesizes it first (with a progress bar). Throws input_error for anything wrong with the folder.
opened_model open_model(const std::string& dir);

}  // namespace troupe::cli
