// Free text is a small automaton that watches for the marker (the states are how much of it
// the text ends with, as in string matching): every byte is allowed, and the one that would
// complete the marker leads into the call instead.
#include "runtime/structured/tool_grammar.h"

#include <bitset>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/structured/json_schema.h"

namespace troupe::structured {

namespace {

constexpr std::string_view call_marker = "<tool_call>";

// How much of the marker the text ends with after `matched` of it and then byte c.
std::size_t marker_advance(std::size_t matched, unsigned char c) {
  std::string seen(call_marker.substr(0, matched));
  seen += char(c);
  for (std::size_t k = std::min(seen.size(), call_marker.size()); k > 0; --k)
    if (seen.compare(seen.size() - k, k, call_marker.substr(0, k)) == 0) return k;
  return 0;
}

}  // namespace

std::shared_ptr<const grammar> compile_hermes_tool_grammar(std::string_view source, const grammar_budget& budget) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(source);
  } catch (const std::exception& e) {
    throw input_error(std::string("tool grammar: not valid JSON: ") + e.what());
  }
  if (!doc.contains("calls") || !doc["calls"].is_array() || doc["calls"].empty())
    throw input_error("tool grammar: 'calls' must list at least one tool");
  grammar_builder b(budget);
  json_schema_rules schemas(source, b);
  using seq = std::vector<grammar::element>;

  const std::int32_t call = b.rule("call");
  for (const auto& c : doc["calls"]) {
    seq alt;
    b.literal(alt, "{\"name\": " + nlohmann::json(c.at("name").get<std::string>()).dump() + ", \"arguments\": ");
    const std::string def = c.value("def", "");
    alt.push_back(grammar_builder::ref(def.empty() ? schemas.any_object() : schemas.at("#/$defs/" + def)));
    alt.push_back(b.byte('}'));
    b.add(call, std::move(alt));
  }
  const std::int32_t newline = b.rule("newline");  // an optional "\n" around the call
  b.add(newline, {});
  b.add(newline, {b.byte('\n')});
  std::vector<std::int32_t> text(call_marker.size());
  for (std::size_t i = 0; i < call_marker.size(); ++i) text[i] = b.rule("text-" + std::to_string(i));
  const std::int32_t block = b.rule("block");
  seq close;
  b.literal(close, "</tool_call>");
  seq body = {grammar_builder::ref(newline), grammar_builder::ref(call), grammar_builder::ref(newline)};
  body.insert(body.end(), close.begin(), close.end());
  const bool parallel = doc.value("parallel", true);
  if (parallel) {
    body.push_back(grammar_builder::ref(text[0]));
  } else {
    const std::int32_t tail = b.rule("tail");  // only whitespace after the one call
    b.add(tail, {});
    std::bitset<256> space;
    for (char c : std::string(" \n\t\r")) space.set(static_cast<unsigned char>(c));
    b.add(tail, {b.bytes(space), grammar_builder::ref(tail)});
    body.push_back(grammar_builder::ref(tail));
  }
  b.add(block, std::move(body));
  for (std::size_t i = 0; i < call_marker.size(); ++i) {
    b.add(text[i], {});  // complete here
    std::map<std::size_t, std::bitset<256>> by_next;
    for (int c = 0; c < 256; ++c) by_next[marker_advance(i, static_cast<unsigned char>(c))].set(std::size_t(c));
    for (const auto& [next, bytes] : by_next)
      b.add(text[i], {b.bytes(bytes), grammar_builder::ref(next == call_marker.size() ? block : text[next])});
  }
  return b.build(text[0]);
}

}  // namespace troupe::structured
