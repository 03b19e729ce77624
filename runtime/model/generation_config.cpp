#include "runtime/model/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"
#include "runtime/model/model_config.h"
#include "runtime/model/config_json.h"

namespace troupe::model {

generation_config load_generation_config(const std::string& dir) {
  generation_config g;
  const std::string path = dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return g;
  const nlohmann::json j = parse_json(read_regular_file(path, max_json_file_bytes, "generation_config.json"), path);
  if (!j.is_object()) throw input_error(path + ": expected a JSON object");
  if (j.contains("eos_token_id")) g.eos_token_ids = eos_ids_of(j["eos_token_id"], path);
  auto number = [&](const char* key) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) throw input_error(path + ": key '" + key + "' has the wrong type (" + j[key].dump() + ")");
    return j[key].get<double>();
  };
  auto& d = g.defaults;
  if (auto v = number("temperature")) d.temperature = float(*v);
  if (auto v = number("top_p")) d.top_p = float(*v);
  if (auto v = number("top_k")) d.top_k = *v > 0 ? int(*v) : 0;
  if (auto v = number("min_p")) d.min_p = float(*v);
  if (auto v = number("repetition_penalty")) d.repetition_penalty = float(*v);
  try {
    d.validate();
  } catch (const input_error& e) {
    throw input_error(path + ": " + e.what());
  }
  return g;
}

}  // namespace troupe::model
