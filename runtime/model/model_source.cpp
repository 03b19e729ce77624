#include "runtime/model/model_source.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/common/regular_file.h"
#include "runtime/model/generation_config.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/pooling.h"
#include "runtime/model/config_json.h"

namespace troupe::model {

model_config load_model_config(const std::string& dir) {
  if (is_gguf_path(dir)) return gguf_model_config(gguf_file(dir));
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) throw input_error(path + ": cannot open (is '" + dir + "' a Hugging Face model folder?)");
  model_config c = parse_model_config(read_regular_file(path, max_json_file_bytes, "config.json"), path);
  for (int id : load_generation_config(dir).eos_token_ids)
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) c.eos_token_ids.push_back(id);
  c.pooling = load_pooling_config(dir);
  return c;
}

}  // namespace troupe::model
