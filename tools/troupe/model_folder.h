// Finding and opening the model folder a command works on.
#pragma once
#include <memory>
#include <string>

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

// Loads the folder; when it is models/small or models/moe (the random models the test and
// benchmark configs name) and missing, synthesizes it first (with a progress bar). Throws input_error for anything wrong with the folder.
opened_model open_model(const std::string& dir);

}  // namespace troupe::cli
