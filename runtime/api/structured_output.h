// The request fields that ask for structured output, in the three spellings clients use:
// OpenAI's `response_format` (json_object, json_schema), vLLM's `guided_json` / `guided_regex` /
// `guided_choice` / `guided_grammar`, and vLLM's newer `structured_outputs` object. All become
// one output_constraint, compiled here once so that a bad schema, pattern or grammar is a 400
// naming the field before anything is queued (the engine's compile is then a cache hit).
//
// Contract: parse_output_constraint(body, raw) reads those fields of the parsed body (`raw` is
// its text: schemas are re-read from it so their properties keep the client's order) and
// returns the constraint, empty for none or {"type": "text"}. More than one of them, an unknown
// key inside them, or a constraint that does not compile is an api_error(400) naming the field.
// `guided_decoding_backend` changes nothing (there is one engine) and is accepted.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/reasoning.h"
#include "runtime/sampling/sampling_params.h"

namespace troupe::api {

sampling::output_constraint parse_output_constraint(const nlohmann::json& body, const std::string& raw);

// A reasoning model's constraint applies to its answer, after the reasoning (chat/reasoning.h):
// `starts_inside` when the prompt left the reasoning open, else an optional reasoning block may
// come first. An empty constraint stays empty.
void constrain_after_reasoning(sampling::output_constraint& c, const chat::reasoning_format& f, bool starts_inside);

}  // namespace troupe::api
