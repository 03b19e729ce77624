// A model's configuration from where it lives: a Hugging Face folder (config.json, with
// generation_config.json's end-of-sequence ids and the pooling files) or a GGUF file's metadata.
// Apart from model_config.h so that the parsers it draws on (gguf_import, generation_config) can
// use model_config without a cycle.
#pragma once
#include <string>

#include "runtime/model/model_config.h"

namespace troupe::model {

// Reads and validates `dir`/config.json, with the end-of-sequence ids of
// generation_config.json added when the folder has one, or a .gguf file's metadata. Throws
// input_error naming the file and the key for a missing or ill-typed key, an unsupported
// architecture or inconsistent sizes.
model_config load_model_config(const std::string& dir);

}  // namespace troupe::model
