// A model's tokenizer, wherever the model keeps it: a folder's tokenizer.json, or the vocabulary
// in a GGUF file's metadata. What the command line serves with and what a draft model is
// checked against.
#pragma once
#include <memory>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace troupe::model {

// Null when the model has none (a folder without tokenizer.json, a GGUF without a vocabulary).
std::unique_ptr<tokenizer::tokenizer> load_tokenizer(const std::string& model);

}  // namespace troupe::model
