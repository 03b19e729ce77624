#include "runtime/common/json.h"

#include <unordered_set>
#include <vector>

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

namespace {

using ojson = nlohmann::ordered_json;

// nlohmann's SAX events into an ordered_json, each value appended where it belongs (an ordered
// object is a vector of pairs), duplicates found through a hash set per open object.
class ordered_builder : public nlohmann::json_sax<ojson> {
 public:
  ojson root;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t&) override { return false; }  // not in JSON text
  bool start_object(std::size_t) override { return open(ojson::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(ojson::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw input_error(e.what());
  }

 private:
  struct open_value {
    ojson* value;
    std::unordered_set<std::string> keys;  // an object's, so far
  };

  // Where the next value goes: the root, the end of the open array, or the open object's key_.
  ojson* slot() {
    if (open_.empty()) return &root;
    ojson& top = *open_.back().value;
    if (top.is_array()) {
      auto& a = top.get_ref<ojson::array_t&>();
      a.emplace_back();
      return &a.back();
    }
    auto& members = static_cast<std::vector<std::pair<const std::string, ojson>>&>(top.get_ref<ojson::object_t&>());
    if (!open_.back().keys.insert(key_).second) {  // given before: its first place, this value
      for (auto& [k, v] : members)
        if (k == key_) return &(v = nullptr);
    }
    members.emplace_back(key_, nullptr);
    return &members.back().second;
  }
  template <class V>
  bool put(V&& v) {
    *slot() = ojson(std::forward<V>(v));
    return true;
  }
  bool open(ojson empty) {
    ojson* at = slot();
    *at = std::move(empty);
    open_.push_back({at, {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  std::vector<open_value> open_;
  std::string key_;
};

}  // namespace

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source, std::size_t max_depth) {
  if (json_depth(text, max_depth) > max_depth)
    throw input_error(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
  ordered_builder b;
  try {
    ojson::sax_parse(text.begin(), text.end(), &b);
  } catch (const std::exception& e) {
    throw input_error(source + ": not valid JSON: " + e.what());
  }
  return std::move(b.root);
}

bool holds(const nlohmann::json& obj, const char* key, std::string_view want) {
  if (!obj.is_object()) return false;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

}  // namespace troupe
