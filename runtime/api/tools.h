// A chat request's tools: `tools`, `tool_choice` and `parallel_tool_calls` checked and turned
// into what the template, the sampler and the output parser take, and OpenAI's tool calls in
// the conversation's assistant messages made ready for templates.
//
// Contract: parse_tools(body) checks the fields (400 naming the field: a tool that is not a
// function, a bad or duplicate name, parameters that are not a schema Troupe compiles, a named
// choice that is not among the tools). `auto` (the default when tools are given) leaves the
// output free and parses calls from it in the model's format; `required` and a named function
// constrain the output with a grammar to a JSON list of calls to the tools allowed (the
// json_array format, whatever the model's own), so the answer is always a valid call whose
// arguments match the function's schema; `none` hides the tools from the template.
// parallel_tool_calls: false allows one call (the grammar's list holds one; with `auto`, calls
// after the first are dropped). A tool's `strict`: forced choices always constrain the
// arguments; with `auto`, strict_tool_constraint constrains the calls in the model's own format
// (hermes, llama3_json, mistral or granite). Mistral's [TOOL_CALLS] and Granite's <|tool_call|>
// markers are special tokens, so such an answer under "auto" keeps special tokens' text (skip_special_tokens false, as vLLM
// sets it): the parser finds the marker in the text, and the grammar allows the token.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/tool_calls.h"
#include "runtime/sampling/sampling_params.h"

namespace troupe::api {

struct tool_request {
  enum class choice { none, automatic, required, named };
  nlohmann::json tools = nlohmann::json::array();  // as the template gets them
  choice mode = choice::none;
  std::string function;  // the named choice's
  bool parallel = true;
  bool forced() const { return mode == choice::required || mode == choice::named; }
  // "auto" with a strict tool: the answer's calls must be constrained in the model's format.
  bool strict_auto() const;
};

tool_request parse_tools(const nlohmann::json& body);

// The grammar of a forced choice: [{"name": ..., "parameters": {...}}, ...] over the tools it
// allows, as a JSON Schema (the tools' $defs moved under the list's, their refs rewritten).
sampling::output_constraint forced_tool_constraint(const tool_request& t, const std::string& raw);

// The grammar of a free answer whose calls, in `format` (hermes, llama3_json, mistral or granite), must be
// valid: strict tools' arguments match their schemas, the others' are any JSON object
// (runtime/structured/tool_grammar.h).
sampling::output_constraint strict_tool_constraint(const tool_request& t, const std::string& raw,
                                                   chat::tool_format format = chat::tool_format::hermes);

// Where a chat answer's tool calls are, given the format the model writes them in: a forced
// choice's grammar writes the JSON list (json_array), "auto" leaves the model its own format
// (none known: a 400 naming tools), "none" has none. Strict tools under "auto" set the
// constraint to strict_tool_constraint's (a constraint already set is a 400 naming tools). A
// mistral or granite answer under "auto" keeps special tokens' text (`params.skip_special_tokens` false).
chat::tool_format answer_tool_format(const tool_request& t, chat::tool_format model_format, sampling::sampling_params& params,
                                     const std::string& raw);

// An assistant message's tool_calls checked ({id, type: "function", function: {name,
// arguments}}) and each `arguments` string parsed into an object, as templates expect it
// (vLLM does the same). `at` names the message for errors.
void normalize_tool_calls(nlohmann::json& message, const std::string& at);

}  // namespace troupe::api
