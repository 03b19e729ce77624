// llama.cpp's GBNF grammars, for `guided_grammar` and `structured_outputs.grammar`: what
// llama.cpp users already have, parsed into a grammar (grammar.h).
//
// Contract: parse_gbnf(text) accepts rules `name ::= alternatives` (a rule ends at the end of
// its line unless inside parentheses or after `|` or `::=`), alternatives of sequences of
// "literals" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [character classes] with
// ranges and ^, rule names, (groups), `.` (any character), and the postfix operators * + ?
// {m} {m,} {m,n}; `#` starts a comment. `root` is the start rule. Errors are input_errors naming
// the line and column, or the rule (undefined, left-recursive).
#pragma once
#include <memory>
#include <string_view>

#include "runtime/structured/grammar.h"

namespace troupe::structured {

std::shared_ptr<const grammar> parse_gbnf(std::string_view text, const grammar_budget& budget = {});

}  // namespace troupe::structured
