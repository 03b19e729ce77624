#include "runtime/common/json.h"
#include "runtime/api/tools.h"

#include <functional>
#include <set>

#include "runtime/api/api_error.h"
#include "runtime/common/error.h"
#include "runtime/structured/constraint.h"

namespace troupe::api {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using kind = sampling::output_constraint::kind;

constexpr std::size_t max_tools = 128;  // OpenAI's limit

// OpenAI's rule for function names: what templates and parsers can carry unquoted.
bool usable_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

void check_tool(const json& t, std::size_t i, std::set<std::string>& names) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!t.is_object()) bad_field(at, "expected an object {\"type\": \"function\", \"function\": {...}}");
  only_keys(t, at, {"type", "function"});
  if (!holds(t, "type", "function")) bad_field(at + ".type", "only \"function\" tools are supported");
  if (!t.contains("function") || !t["function"].is_object()) bad_field(at + ".function", "is required (an object)");
  const json& f = t["function"];
  only_keys(f, at + ".function", {"name", "description", "parameters", "strict"});
  if (!f.contains("name") || !f["name"].is_string() || !usable_name(f["name"].get<std::string>()))
    bad_field(at + ".function.name", "is required: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
  if (!names.insert(f["name"].get<std::string>()).second)
    bad_field(at + ".function.name", "\"" + f["name"].get<std::string>() + "\" is already the name of another tool");
  if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
    bad_field(at + ".function.description", "expected a string");
  if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
    bad_field(at + ".function.parameters", "expected a JSON Schema object");
  if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean()) bad_field(at + ".function.strict", "expected a boolean");
}

bool strict(const json& tool) {
  const json& f = tool["function"];
  return f.contains("strict") && f["strict"] == true;
}

// A tool's parameters schema in the client's order; {"type": "object"} when it has none.
ojson parameters_of(const ojson& raw_tools, std::size_t i) {
  const ojson& f = raw_tools[i]["function"];
  if (!f.contains("parameters") || f["parameters"].is_null()) return ojson{{"type", "object"}};
  return f["parameters"];
}

// Rewrites the refs of tool i's schema for its new place under the list's $defs.
void rewrite_refs(ojson& s, const std::string& def) {
  if (s.is_array()) {
    for (auto& x : s) rewrite_refs(x, def);
    return;
  }
  if (!s.is_object()) return;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it.key() == "$ref" && it->is_string()) {
      const std::string r = it->get<std::string>();
      for (const std::string prefix : {"#/$defs/", "#/definitions/"})
        if (r.rfind(prefix, 0) == 0) *it = "#/$defs/" + def + "_" + r.substr(prefix.size());
      if (r == "#") *it = "#/$defs/" + def;
    } else if (it.key() != "const" && it.key() != "enum") {
      rewrite_refs(*it, def);
    }
  }
}

}  // namespace

tool_request parse_tools(const json& body) {
  tool_request t;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) bad_field("tools", "expected an array of tools");
    if (it->size() > max_tools) bad_field("tools", "at most " + std::to_string(max_tools) + " tools");
    std::set<std::string> names;
    for (std::size_t i = 0; i < it->size(); ++i) check_tool((*it)[i], i, names);
    t.tools = *it;
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) bad_field("parallel_tool_calls", "expected a boolean");
    t.parallel = it->get<bool>();
  }
  t.mode = t.tools.empty() ? tool_request::choice::none : tool_request::choice::automatic;
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    const json& c = *it;
    if (c == "none") t.mode = tool_request::choice::none;
    else if (c == "auto") t.mode = t.tools.empty() ? tool_request::choice::none : tool_request::choice::automatic;
    else if (c == "required") t.mode = tool_request::choice::required;
    else if (holds(c, "type", "function") && c.contains("function") && c["function"].is_object() &&
             c["function"].contains("name") && c["function"]["name"].is_string()) {
      only_keys(c, "tool_choice", {"type", "function"});
      only_keys(c["function"], "tool_choice.function", {"name"});
      t.mode = tool_request::choice::named;
      t.function = c["function"]["name"].get<std::string>();
      bool found = false;
      for (const auto& tool : t.tools) found = found || tool["function"]["name"] == t.function;
      if (!found) bad_field("tool_choice.function.name", "\"" + t.function + "\" is not one of the request's tools");
    } else {
      bad_field("tool_choice", "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (t.mode == tool_request::choice::required && t.tools.empty()) bad_field("tool_choice", "\"required\" needs tools");
  }
  return t;
}

namespace {

// The tools' parameter schemas under one document's $defs (tool i's as "tool<i>", its own
// $defs beside it as "tool<i>_<name>", refs rewritten), each first compiled alone so that an
// error names the client's own schema. `keep` chooses the tools.
struct tool_defs {
  ojson defs = ojson::object();
  std::vector<std::pair<std::string, std::string>> calls;  // (name, def)
};

tool_defs hoist_tool_schemas(const tool_request& t, const std::string& raw, const std::function<bool(std::size_t)>& keep) {
  const ojson raw_tools = parse_ordered_json(raw, "the request body")["tools"];  // parsed already: this cannot fail
  tool_defs out;
  for (std::size_t i = 0; i < t.tools.size(); ++i) {
    if (!keep(i)) continue;
    const std::string name = t.tools[i]["function"]["name"].get<std::string>();
    ojson params = parameters_of(raw_tools, i);
    try {
      structured::compile_constraint({kind::json_schema, params.dump()});
    } catch (const input_error& e) {
      bad_field("tools[" + std::to_string(i) + "].function.parameters", e.what());
    }
    const std::string def = "tool" + std::to_string(i);
    for (const char* k : {"$defs", "definitions"})
      if (params.is_object() && params.contains(k) && params[k].is_object()) {
        for (auto it = params[k].begin(); it != params[k].end(); ++it) {
          ojson d = it.value();
          rewrite_refs(d, def);
          out.defs[def + "_" + it.key()] = std::move(d);
        }
        params.erase(k);
      }
    rewrite_refs(params, def);
    out.defs[def] = std::move(params);
    out.calls.emplace_back(name, def);
  }
  return out;
}

sampling::output_constraint compiled(sampling::output_constraint c, const char* field) {
  try {
    structured::compile_constraint(c);
  } catch (const input_error& e) {
    bad_field(field, std::string("the tools' schemas together: ") + e.what());
  }
  return c;
}

}  // namespace

sampling::output_constraint forced_tool_constraint(const tool_request& t, const std::string& raw) {
  const tool_defs h = hoist_tool_schemas(t, raw, [&](std::size_t i) {
    return t.mode != tool_request::choice::named || t.tools[i]["function"]["name"] == t.function;
  });
  ojson alternatives = ojson::array();
  for (const auto& [name, def] : h.calls)
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", name}}}, {"parameters", {{"$ref", "#/$defs/" + def}}}}},
                            {"required", {"name", "parameters"}},
                            {"additionalProperties", false}});
  ojson list = {{"type", "array"}, {"minItems", 1}};
  if (!t.parallel || t.mode == tool_request::choice::named) list["maxItems"] = 1;
  list["items"] = alternatives.size() == 1 ? alternatives[0] : ojson{{"anyOf", alternatives}};
  list["$defs"] = h.defs;
  return compiled({kind::json_schema, list.dump()}, "tools");
}

sampling::output_constraint strict_tool_constraint(const tool_request& t, const std::string& raw, chat::tool_format format) {
  if (format != chat::tool_format::hermes && format != chat::tool_format::llama3_json && format != chat::tool_format::mistral &&
      format != chat::tool_format::granite && format != chat::tool_format::deepseek_v3)
    throw std::logic_error(std::string("strict_tool_constraint: no grammar for the ") + chat::tool_format_name(format) + " format");
  tool_defs h = hoist_tool_schemas(t, raw, [&](std::size_t i) { return strict(t.tools[i]); });
  ojson calls = ojson::array();
  for (const auto& [name, def] : h.calls) calls.push_back({{"name", name}, {"def", def}});
  for (const auto& tool : t.tools)  // the others: any object as arguments
    if (!strict(tool)) calls.push_back({{"name", tool["function"]["name"].get<std::string>()}, {"def", ""}});
  const ojson doc = {{"format", chat::tool_format_name(format)}, {"calls", calls}, {"parallel", t.parallel}, {"$defs", h.defs}};
  return compiled({kind::tool_calls, doc.dump()}, "tools");
}

bool tool_request::strict_auto() const {
  if (mode != choice::automatic) return false;
  for (const auto& tool : tools)
    if (strict(tool)) return true;
  return false;
}

chat::tool_format answer_tool_format(const tool_request& t, chat::tool_format model_format, sampling::sampling_params& params,
                                     const std::string& raw) {
  if (t.forced()) return chat::tool_format::json_array;
  if (t.mode != tool_request::choice::automatic) return chat::tool_format::none;
  if (model_format == chat::tool_format::none)
    throw api_error(400, "tools: this model's chat template shows no tool-call format and the topology sets no "
                         "[model] tool_call_parser, so calls could not be found in a free answer; tool_choice "
                         "\"required\" or a named function still works (the output is then constrained)", "tools");
  // Mistral's [TOOL_CALLS] and Granite's <|tool_call|> are special tokens: their text must reach
  // the parser (and the grammar).
  if (model_format == chat::tool_format::mistral || model_format == chat::tool_format::granite) params.skip_special_tokens = false;
  if (t.strict_auto()) {  // strict tools under "auto": the answer's calls are constrained
    if (model_format == chat::tool_format::pythonic)
      throw api_error(400, "tools: strict tools under tool_choice \"auto\" are constrained in the model's own call format, and "
                           "there is no grammar for the pythonic one; use tool_choice \"required\" or a named function (the "
                           "output is then constrained), or strict: false", "tools");
    if (!params.constraint.empty())
      throw api_error(400, "tools: strict tools under tool_choice \"auto\" cannot be combined with another structured output",
                      "tools");
    params.constraint = strict_tool_constraint(t, raw, model_format);
  }
  return model_format;
}

void normalize_tool_calls(json& message, const std::string& at) {
  auto it = message.find("tool_calls");
  if (it == message.end()) return;
  if (it->is_null()) {
    message.erase(it);
    return;
  }
  if (!holds(message, "role", "assistant")) bad_field(at + ".tool_calls", "only assistant messages carry tool calls");
  if (!it->is_array() || it->size() > max_tools) bad_field(at + ".tool_calls", "expected an array of at most 128 tool calls");
  for (std::size_t j = 0; j < it->size(); ++j) {
    json& call = (*it)[j];
    const std::string c = at + ".tool_calls[" + std::to_string(j) + "]";
    if (!call.is_object()) bad_field(c, "expected an object {\"id\", \"type\": \"function\", \"function\": {...}}");
    only_keys(call, c, {"id", "type", "function", "index"});
    if (call.contains("id") && !call["id"].is_string()) bad_field(c + ".id", "expected a string");
    if (call.contains("type") && !holds(call, "type", "function")) bad_field(c + ".type", "only \"function\" calls are supported");
    if (!call.contains("function") || !call["function"].is_object()) bad_field(c + ".function", "is required (an object)");
    json& f = call["function"];
    only_keys(f, c + ".function", {"name", "arguments"});
    if (!f.contains("name") || !f["name"].is_string()) bad_field(c + ".function.name", "is required (a string)");
    if (!f.contains("arguments") || f["arguments"].is_null()) f["arguments"] = json::object();
    if (f["arguments"].is_string()) {
      try {
        f["arguments"] = json::parse(f["arguments"].get<std::string>());
      } catch (const json::exception&) {
        bad_field(c + ".function.arguments", "is not JSON");
      }
    }
    if (!f["arguments"].is_object()) bad_field(c + ".function.arguments", "expected a JSON object (or a string holding one)");
  }
}

}  // namespace troupe::api
