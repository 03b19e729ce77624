// The grammar of a free chat answer whose tool calls, in the format the model is trained to
// write them, must be valid: what `strict: true` tools ask for under tool_choice "auto".
//
//   hermes       text, and anywhere in it <tool_call>\n{"name": N, "arguments": A}\n</tool_call>
//   mistral      text, and anywhere in it [TOOL_CALLS][{"name": N, "arguments": A}, ...]
//   granite      the same list after <|tool_call|>
//   deepseek_v3  text, and anywhere in it <｜tool▁calls▁begin｜> calls <｜tool▁calls▁end｜>, each
//                call as V3/R1 or V3.1 writes it (runtime/chat/deepseek_calls.h)
//   llama3_json  either text that does not open with '{' or <|python_tag|>, or the whole answer
//                calls {"name": N, "parameters": A} (after an optional <|python_tag|>),
//                separated by ';'
//
// These are the shapes runtime/chat/tool_calls.h parses, so a constrained answer's calls are
// always found and always valid.
//
// Contract: compile_tool_grammar(source) takes a JSON document {"format": F, "calls": [{"name":
// N, "def": D}, ...], "parallel": bool, "$defs": {...}} (F hermes when absent): each call's
// arguments are the schema at #/$defs/D (refs resolved in the document), or any JSON object when
// D is empty. A call must name one of the listed tools. With parallel false, one call at most,
// and only whitespace after it. Text is complete wherever it stands outside a call. Whitespace
// between a call's parts and after the calls is at most 4 bytes in a row.
#pragma once
#include <memory>
#include <string_view>

#include "runtime/structured/grammar.h"

namespace troupe::structured {

std::shared_ptr<const grammar> compile_tool_grammar(std::string_view source, const grammar_budget& budget = {});

}  // namespace troupe::structured
