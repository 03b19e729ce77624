// The error an OpenAI-compatible client gets, and the checks of a request body that raise it.
// Its own unit so that every parser of a request's parts (tools, structured outputs, the
// request itself) can raise it without including each other.
#pragma once
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::api {

// An error the client gets as {"error": {"message", "type", "param", "code"}} with `status`.
class api_error : public std::runtime_error {
 public:
  api_error(int status, std::string message, std::string param = "", std::string type = "");
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  nlohmann::json body() const;
  // Seconds a 429 or 503 asks the client to wait (Retry-After); 0: the server's default.
  double retry_after() const { return retry_after_; }
  api_error& with_retry_after(double s) {
    retry_after_ = s;
    return *this;
  }

 private:
  int status_;
  double retry_after_ = 0;
  std::string param_, type_;
};

// A 400 that names the field at fault: "FIELD: WHAT", with FIELD as the error's param.
[[noreturn]] void bad_field(const std::string& field, const std::string& what);
// A request body that must be a JSON object whose keys are all in `known`: the object, or a 400
// (not JSON, not an object, or naming the first key not known).
nlohmann::json parse_body_object(const std::string& body, const std::set<std::string>& known);
// A 400 naming "field.key" for the first key of `obj` not in `keys`.
void only_keys(const nlohmann::json& obj, const std::string& field, std::initializer_list<const char*> keys);

}  // namespace troupe::api
