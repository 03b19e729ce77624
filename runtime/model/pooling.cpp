#include "runtime/model/pooling.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/common/regular_file.h"

namespace troupe::model {

namespace {

nlohmann::json read_json(const std::string& path) {
  return parse_json(read_regular_file(path, max_json_file_bytes, "model file"), path);
}

bool flag(const nlohmann::json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) throw input_error(path + ": key '" + std::string(key) + "' must be true or false");
  return j[key].get<bool>();
}

pooling_method method_of(const nlohmann::json& j, const std::string& path) {
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"})
    if (flag(j, path, unsupported)) throw input_error(path + ": " + unsupported + " is not supported (last token, mean or CLS pooling)");
  if (j.contains("include_prompt") && !flag(j, path, "include_prompt"))
    throw input_error(path + ": include_prompt false is not supported (every input token is pooled)");
  std::vector<pooling_method> on;
  if (flag(j, path, "pooling_mode_lasttoken")) on.push_back(pooling_method::last);
  if (flag(j, path, "pooling_mode_mean_tokens")) on.push_back(pooling_method::mean);
  if (flag(j, path, "pooling_mode_cls_token")) on.push_back(pooling_method::cls);
  // Older folders name the mode as a string.
  if (on.empty() && j.contains("pooling_mode") && j["pooling_mode"].is_string()) {
    const auto m = j["pooling_mode"].get<std::string>();
    if (m == "lasttoken") on.push_back(pooling_method::last);
    else if (m == "mean") on.push_back(pooling_method::mean);
    else if (m == "cls") on.push_back(pooling_method::cls);
    else throw input_error(path + ": pooling_mode \"" + m + "\" is not supported (lasttoken, mean or cls)");
  }
  if (on.empty()) throw input_error(path + ": no pooling mode is set (pooling_mode_lasttoken, _mean_tokens or _cls_token)");
  if (on.size() > 1) throw input_error(path + ": several pooling modes at once (their concatenation) are not supported");
  return on.front();
}

}  // namespace

const char* pooling_method_name(pooling_method m) {
  switch (m) {
    case pooling_method::last: return "last";
    case pooling_method::mean: return "mean";
    case pooling_method::cls: return "cls";
  }
  return "?";
}

std::optional<pooling_config> load_pooling_config(const std::string& dir) {
  const std::string path = dir + "/modules.json";
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  const nlohmann::json mods = read_json(path);
  if (!mods.is_array()) throw input_error(path + ": expected a list of modules");
  std::optional<pooling_config> out;
  bool normalize = false;
  for (std::size_t i = 0; i < mods.size(); ++i) {
    const auto& m = mods[i];
    const std::string where = path + ": module " + std::to_string(i);
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) throw input_error(where + " has no \"type\" string");
    const std::string type = m["type"].get<std::string>();
    const std::string kind = type.substr(type.rfind('.') == std::string::npos ? 0 : type.rfind('.') + 1);
    if (kind == "Transformer") continue;
    if (kind == "Normalize") {
      normalize = true;
      continue;
    }
    if (kind != "Pooling") throw input_error(where + ": type " + type + " is not supported (Transformer, Pooling, Normalize)");
    if (out) throw input_error(where + ": a second Pooling module");
    const std::string sub = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (sub.empty() || sub.find("..") != std::string::npos || sub.front() == '/')
      throw input_error(where + ": \"path\" must name the Pooling module's folder inside the model folder");
    const std::string cfg_path = dir + "/" + sub + "/config.json";
    const nlohmann::json j = read_json(cfg_path);
    if (!j.is_object()) throw input_error(cfg_path + ": expected a JSON object");
    out = pooling_config{method_of(j, cfg_path), false};
  }
  if (!out) return std::nullopt;  // sentence-transformers without pooling: not an embedding model we know
  out->normalize = normalize;
  return out;
}

pooled_positions positions_to_pool(const pooling_config& c, int len) {
  switch (c.method) {
    case pooling_method::last: return {len - 1, 1};
    case pooling_method::mean: return {0, len};
    case pooling_method::cls: return {0, 1};
  }
  return {};
}

std::vector<float> finish_embedding(const pooling_config& c, const std::vector<double>& sum, int count) {
  std::vector<double> v = sum;
  if (count > 1)
    for (auto& x : v) x /= count;
  if (c.normalize) {
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    // sentence-transformers' Normalize is F.normalize: divides by max(norm, 1e-12).
    for (auto& x : v) x /= std::max(norm, 1e-12);
  }
  return {v.begin(), v.end()};
}

}  // namespace troupe::model
