#include "runtime/api/api_error.h"

#include <algorithm>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/tokenizer/unicode.h"

namespace troupe::api {

using json = nlohmann::json;

void bad_field(const std::string& field, const std::string& what) { throw api_error(400, field + ": " + what, field); }

void only_keys(const json& obj, const std::string& field, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }))
      bad_field(field + "." + it.key(), "is not supported");
}

json parse_body_object(const std::string& body, const std::set<std::string>& known) {
  json j;
  try {
    j = parse_json(body, "the body");
  } catch (const input_error& e) {
    throw api_error(400, e.what());
  }
  if (!j.is_object()) throw api_error(400, "the body must be a JSON object");
  for (auto& [k, v] : j.items())
    if (!known.count(k)) bad_field(k.size() > 64 ? k.substr(0, 64) + "..." : k, "is not a field this endpoint supports");
  return j;
}

// Messages and field names may echo the client's bytes, which need not be UTF-8.
api_error::api_error(int status, std::string message, std::string param, std::string type)
    : std::runtime_error(tokenizer::utf8_sanitize(message)), status_(status), param_(tokenizer::utf8_sanitize(param)),
      type_(std::move(type)) {
  if (type_.empty()) {
    switch (status_) {
      case 400: type_ = "invalid_request_error"; break;
      case 404: type_ = "not_found_error"; break;
      case 405: type_ = "invalid_request_error"; break;
      case 413: type_ = "invalid_request_error"; break;
      case 429: type_ = "rate_limit_error"; break;
      case 503: type_ = "service_unavailable_error"; break;
      default: type_ = "server_error";
    }
  }
}

json api_error::body() const {
  return {{"error",
           {{"message", what()}, {"type", type_}, {"param", param_.empty() ? json(nullptr) : json(param_)}, {"code", status_}}}};
}

}  // namespace troupe::api
