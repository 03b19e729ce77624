// config.json: a Hugging Face folder's configuration read into model_config by its family
// (family.h), the checks every config passes however it was read, and the text the synthesizer
// writes.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_config.h"

namespace troupe::model {

// eos_token_id as Hugging Face writes it: an id, a list of ids, or null.
std::vector<int> eos_ids_of(const nlohmann::json& v, const std::string& source);

// Parses config.json text; `source` names it in errors.
model_config parse_model_config(const std::string& text, const std::string& source);
// What the kernels and the KV layout need of a config however it was read (config.json, GGUF
// metadata): positive finite rope_theta and rms_norm_eps, positive sizes, heads that divide.
// Throws input_error "<source>: 'KEY' ..." naming the first that is wrong.
void check_model_config(const std::string& source, const model_config& c);

// The config.json text for `c` (what the model synthesizer writes).
std::string to_config_json(const model_config& c);

}  // namespace troupe::model
