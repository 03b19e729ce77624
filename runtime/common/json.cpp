#include "runtime/common/json.h"

#include "runtime/common/error.h"

namespace troupe {

std::size_t json_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_json(std::string_view text, const std::string& source, std::size_t max_depth) {
  if (json_depth(text, max_depth) > max_depth)
    throw input_error(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    throw input_error(source + ": not valid JSON: " + e.what());
  }
}

}  // namespace troupe
