#include "runtime/api/lora_catalog.h"

#include <algorithm>

#include "runtime/api/api_error.h"

namespace troupe::api {

lora_catalog::lora_catalog(std::vector<std::string> base_names, std::size_t max_adapters)
    : base_names_(std::move(base_names)), max_(max_adapters) {}

std::optional<lora_entry> lora_catalog::find(const std::string& name) const {
  std::lock_guard<std::mutex> l(m_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<lora_entry> lora_catalog::list() const {
  std::lock_guard<std::mutex> l(m_);
  std::vector<lora_entry> out;
  for (const auto& [name, e] : by_name_) out.push_back(e);
  return out;
}

std::optional<std::string> lora_catalog::refuse_new(const std::string& name, const std::set<std::string>& loading) const {
  if (name.empty() || name.size() > 256) return "lora_name: expected 1 to 256 characters";
  if (std::find(base_names_.begin(), base_names_.end(), name) != base_names_.end())
    return "lora_name: \"" + name + "\" is the base model's served name";
  std::lock_guard<std::mutex> l(m_);
  if (by_name_.count(name) || loading.count(name)) return "lora_name: the adapter \"" + name + "\" is already loaded";
  if (by_name_.size() + loading.size() >= max_)
    return "lora_name: " + std::to_string(max_) + " adapters are loaded, the most allowed ([lora] max_adapters); unload one first";
  return std::nullopt;
}

void lora_catalog::add(lora_entry e) {
  std::lock_guard<std::mutex> l(m_);
  std::string name = e.name;
  by_name_[name] = std::move(e);
}

std::optional<std::string> lora_catalog::remove(const std::string& name) {
  std::lock_guard<std::mutex> l(m_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return "lora_name: no adapter \"" + name + "\" is loaded";
  if (it->second.from_topology)
    return "lora_name: the adapter \"" + name + "\" is the topology's ([lora] adapters); remove it there and restart";
  by_name_.erase(it);
  return std::nullopt;
}

namespace {

std::string string_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) bad_field(key, "is required");
  if (!j[key].is_string() || j[key].get<std::string>().empty()) bad_field(key, "expected a non-empty string");
  return j[key].get<std::string>();
}

}  // namespace

lora_load_request parse_lora_load(const std::string& body) {
  const auto j = parse_body_object(body, {"lora_name", "lora_path", "load_inplace"});
  if (j.contains("load_inplace") && !(j["load_inplace"].is_boolean() && !j["load_inplace"].get<bool>()))
    bad_field("load_inplace", "replacing a loaded adapter in place is not supported: unload it, then load the new one");
  return {string_field(j, "lora_name"), string_field(j, "lora_path")};
}

std::string parse_lora_unload(const std::string& body) {
  const auto j = parse_body_object(body, {"lora_name", "lora_int_id"});
  return string_field(j, "lora_name");
}

}  // namespace troupe::api
