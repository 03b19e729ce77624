// The grammar of a free chat answer whose tool calls, in the Hermes format Qwen2.5/Qwen3 are
// trained on (<tool_call>\n{"name": N, "arguments": A}\n</tool_call>), must be valid: what
// `strict: true` tools ask for under tool_choice "auto".
//
// Contract: compile_hermes_tool_grammar(source) takes a JSON document {"calls": [{"name": N,
// "def": D}, ...], "parallel": bool, "$defs": {...}}: each call's arguments are the schema at
// #/$defs/D (refs resolved in the document), or any JSON object when D is empty. The grammar
// accepts any text that does not contain "<tool_call>"; the marker opens a call, which must be
// one of the listed ones; after "</tool_call>" text and further calls may follow (parallel) or
// only whitespace (not). Text is complete wherever it stands outside a call.
#pragma once
#include <memory>
#include <string_view>

#include "runtime/structured/grammar.h"

namespace troupe::structured {

std::shared_ptr<const grammar> compile_hermes_tool_grammar(std::string_view source, const grammar_budget& budget = {});

}  // namespace troupe::structured
