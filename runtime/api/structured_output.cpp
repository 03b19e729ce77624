#include "runtime/common/json.h"
#include "runtime/api/structured_output.h"

#include <set>

#include "runtime/api/api_error.h"
#include "runtime/common/error.h"
#include "runtime/structured/constraint.h"

namespace troupe::api {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using kind = sampling::output_constraint::kind;

// A schema as the client wrote it: an object (its text taken from the raw body, in order) or a
// string holding JSON.
std::string schema_text(const ojson& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() || v.is_boolean()) return v.dump();
  bad_field(field, "expected a JSON Schema (an object, or a string holding one)");
}

struct found {
  std::string field;
  sampling::output_constraint c;
};

void from_response_format(const json& rf, const ojson& raw_rf, std::vector<found>& out) {
  if (!rf.is_object()) bad_field("response_format", "expected an object");
  only_keys(rf, "response_format", {"type", "json_schema"});
  const std::string type = rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
  if (type == "text") return;
  if (type == "json_object") {
    out.push_back({"response_format", {kind::json_object, ""}});
    return;
  }
  if (type != "json_schema") bad_field("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    bad_field("response_format.json_schema", "is required with type \"json_schema\" (an object with a \"schema\")");
  only_keys(rf["json_schema"], "response_format.json_schema", {"name", "description", "schema", "strict"});
  if (!rf["json_schema"].contains("schema")) bad_field("response_format.json_schema.schema", "is required");
  out.push_back({"response_format.json_schema.schema",
                 {kind::json_schema, schema_text(raw_rf["json_schema"]["schema"], "response_format.json_schema.schema")}});
}

std::string choices_text(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) bad_field(field, "expected a non-empty array of strings");
  for (const auto& x : v)
    if (!x.is_string() || x.get<std::string>().empty()) bad_field(field, "expected a non-empty array of non-empty strings");
  return v.dump();
}

std::string string_of(const json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty()) bad_field(field, "expected a non-empty string");
  return v.get<std::string>();
}

void from_structured_outputs(const json& so, const ojson& raw_so, std::vector<found>& out) {
  if (!so.is_object()) bad_field("structured_outputs", "expected an object");
  only_keys(so, "structured_outputs", {"json", "regex", "choice", "grammar", "json_object"});
  for (auto it = so.begin(); it != so.end(); ++it) {
    if (it->is_null()) continue;
    const std::string field = "structured_outputs." + it.key();
    if (it.key() == "json") out.push_back({field, {kind::json_schema, schema_text(raw_so["json"], field)}});
    if (it.key() == "regex") out.push_back({field, {kind::regex, string_of(*it, field)}});
    if (it.key() == "choice") out.push_back({field, {kind::choice, choices_text(*it, field)}});
    if (it.key() == "grammar") out.push_back({field, {kind::grammar, string_of(*it, field)}});
    if (it.key() == "json_object") {
      if (!it->is_boolean()) bad_field(field, "expected a boolean");
      if (it->get<bool>()) out.push_back({field, {kind::json_object, ""}});
    }
  }
}

}  // namespace

sampling::output_constraint parse_output_constraint(const json& body, const std::string& raw) {
  static const char* fields[] = {"response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                                 "structured_outputs"};
  bool any = false;
  for (const char* f : fields) any = any || (body.contains(f) && !body[f].is_null());
  if (body.contains("guided_whitespace_pattern") && !body["guided_whitespace_pattern"].is_null())
    bad_field("guided_whitespace_pattern", "is not supported (JSON comes out compact: one optional space after ',' and ':')");
  if (const auto it = body.find("guided_decoding_backend"); it != body.end() && !it->is_null() && !it->is_string())
    bad_field("guided_decoding_backend", "expected a string");
  if (!any) return {};
  const ojson ordered = parse_ordered_json(raw, "the request body");  // parsed already: this cannot fail
  std::vector<found> out;
  if (body.contains("response_format") && !body["response_format"].is_null())
    from_response_format(body["response_format"], ordered["response_format"], out);
  if (body.contains("guided_json") && !body["guided_json"].is_null())
    out.push_back({"guided_json", {kind::json_schema, schema_text(ordered["guided_json"], "guided_json")}});
  if (body.contains("guided_regex") && !body["guided_regex"].is_null())
    out.push_back({"guided_regex", {kind::regex, string_of(body["guided_regex"], "guided_regex")}});
  if (body.contains("guided_choice") && !body["guided_choice"].is_null())
    out.push_back({"guided_choice", {kind::choice, choices_text(body["guided_choice"], "guided_choice")}});
  if (body.contains("guided_grammar") && !body["guided_grammar"].is_null())
    out.push_back({"guided_grammar", {kind::grammar, string_of(body["guided_grammar"], "guided_grammar")}});
  if (body.contains("structured_outputs") && !body["structured_outputs"].is_null())
    from_structured_outputs(body["structured_outputs"], ordered["structured_outputs"], out);
  if (out.empty()) return {};
  if (out.size() > 1) bad_field(out[1].field, "only one structured output may be asked for; " + out[0].field + " already is");
  try {
    structured::compile_constraint(out[0].c);
  } catch (const input_error& e) {
    bad_field(out[0].field, e.what());
  }
  return out[0].c;
}

void constrain_after_reasoning(sampling::output_constraint& c, const chat::reasoning_format& f, bool starts_inside) {
  if (c.empty()) return;
  c.reasoning_start = starts_inside ? std::string() : f.start;
  c.reasoning_end = f.end;
}

}  // namespace troupe::api
