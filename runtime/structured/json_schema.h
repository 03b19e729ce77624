// JSON Schema to grammar, for `response_format: json_schema`, `guided_json` and strict tool
// arguments; and the grammar of any JSON object for `response_format: json_object`.
//
// Contract: compile_json_schema(text) takes the schema's JSON text (properties come out in the
// order the schema lists them) and returns a grammar whose every sentence is compact JSON (one
// optional space after ',' and ':') that validates against the schema. Supported: type (a name
// or a list), properties, required, additionalProperties (false, true or a schema: without
// properties it is a map), enum, const, items, prefixItems, minItems, maxItems, anyOf, oneOf
// (branches should not overlap: the grammar does not exclude a value matching two), allOf of one
// schema, $ref to "#", "#/$defs/..." and "#/definitions/..." (recursion included), minLength,
// maxLength, pattern (searched, as JSON Schema does, unless anchored), format (date, time,
// date-time, uuid, email, ipv4, hostname, uri), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum (whole-number bounds; an integer with an unbounded side stays within 15
// digits, a number's bounded one has no exponent, an unbounded one's exponent has at most two
// digits; strings never hold a \u escape of a surrogate). Annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are accepted and change
// nothing. Any other keyword is an input_error naming it and where it is.
#pragma once
#include <memory>
#include <string_view>

#include "runtime/structured/grammar.h"

namespace troupe::structured {

std::shared_ptr<const grammar> compile_json_schema(std::string_view schema_text, const grammar_budget& budget = {});
std::shared_ptr<const grammar> json_object_grammar();

// The rules of one schema document's parts inside a grammar being built by someone else (a
// tool call embeds each tool's arguments): at("#/$defs/name") is the rule of that definition
// (its refs resolved in the document), any_object() that of any JSON object. Errors as
// compile_json_schema's. The builder must outlive this and be built after the last at().
class json_schema_rules {
 public:
  json_schema_rules(std::string_view document_text, grammar_builder& b);
  ~json_schema_rules();
  std::int32_t at(const std::string& ref);
  std::int32_t any_object();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::structured
