// JSON from outside (request bodies, model files) parsed with a bound on nesting. nlohmann's
// parser is iterative, but copying, dumping and converting a parsed tree recurse once per level:
// a 40 KB body of 20,000 nested brackets would overflow the stack later, far from the parse.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace troupe {

// Deep enough for any real request (tool schemas nest a dozen levels) or model file.
inline constexpr std::size_t max_json_depth = 128;

// The deepest nesting of arrays and objects in `text`, counted without parsing (strings and
// their escapes skipped); stops counting past `limit`, so it is O(n) with no allocation.
std::size_t json_depth(std::string_view text, std::size_t limit);

// Parses `text`; throws input_error "<source>: not valid JSON: ..." or "<source>: JSON nested
// deeper than N levels" so the caller can name the input.
nlohmann::json parse_json(std::string_view text, const std::string& source, std::size_t max_depth = max_json_depth);

// The same, keeping each object's keys in the text's order (what a JSON Schema's properties and
// a tool's parameters need), in time linear in the text: nlohmann's own ordered parse looks every
// key up in its object as it inserts it, so a 100,000-key object took 30 s. A key given twice
// keeps its first place and its last value, as parse_json keeps the last value.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source, std::size_t max_depth = max_json_depth);

// Whether `obj` is an object whose `key` holds the string `want`. Request fields are compared with
// this, not nlohmann's value(key, default), which throws type_error when a client sends the key
// with another type (`"type": 5`): a 500 and an abort in the fuzzer instead of a 400.
bool holds(const nlohmann::json& obj, const char* key, std::string_view want);

}  // namespace troupe
