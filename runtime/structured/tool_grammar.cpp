// Free text is a small automaton that watches for a format's marker (the states are how much of
// it the text ends with, as in string matching): every byte is allowed, and the one that would
// complete the marker leads into the calls instead. Llama 3's calls are the whole answer or none
// of it, so only the answer's opening is watched there.
#include "runtime/common/json.h"
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

using element_seq = std::vector<grammar::element>;
using ojson = nlohmann::ordered_json;

// How much of `marker` the text ends with after `matched` of it and then byte c.
std::size_t marker_advance(std::string_view marker, std::size_t matched, unsigned char c) {
  std::string seen(marker.substr(0, matched));
  seen += char(c);
  for (std::size_t k = std::min(seen.size(), marker.size()); k > 0; --k)
    if (seen.compare(seen.size() - k, k, marker.substr(0, k)) == 0) return k;
  return 0;
}

std::bitset<256> whitespace() {
  std::bitset<256> s;
  for (char c : std::string(" \n\t\r")) s.set(static_cast<unsigned char>(c));
  return s;
}

struct tool_rules {
  grammar_builder& b;
  json_schema_rules& schemas;
  const ojson& doc;

  // One call of any listed tool: {"name": N, "<key>": A}.
  std::int32_t call(const std::string& key) {
    const std::int32_t r = b.rule("call");
    for (const auto& c : doc["calls"]) {
      element_seq alt;
      b.literal(alt, "{\"name\": " + nlohmann::json(c.at("name").get<std::string>()).dump() + ", \"" + key + "\": ");
      const std::string def = c.value("def", "");
      alt.push_back(grammar_builder::ref(def.empty() ? schemas.any_object() : schemas.at("#/$defs/" + def)));
      alt.push_back(b.byte('}'));
      b.add(r, std::move(alt));
    }
    return r;
  }

  // Whitespace, at most 4 bytes in a row (complete everywhere). Bounded, as JSON Schema's
  // whitespace is: a model that likes whitespace (a random one did) would otherwise spend all
  // its tokens before a call's closing bracket and never close it.
  std::int32_t spaces_rule = -1;
  std::int32_t spaces() {
    if (spaces_rule < 0) spaces_rule = b.repeat({b.bytes(whitespace())}, 0, 4, "spaces");
    return spaces_rule;
  }

  // `item` once, or (parallel) one or more separated by `sep` with whitespace around it.
  std::int32_t items(std::int32_t item, char sep, bool parallel) {
    if (!parallel) return item;
    const std::int32_t more = b.rule("more-calls");
    b.add(more, {});
    b.add(more, {grammar_builder::ref(spaces()), b.byte(static_cast<unsigned char>(sep)), grammar_builder::ref(spaces()),
                 grammar_builder::ref(item), grammar_builder::ref(more)});
    const std::int32_t r = b.rule("calls");
    b.add(r, {grammar_builder::ref(item), grammar_builder::ref(more)});
    return r;
  }

  // Free text watching for `marker`, whose completion leads into `block`: the rule of the start.
  std::int32_t watching(std::string_view marker, std::int32_t block) {
    std::vector<std::int32_t> text(marker.size());
    for (std::size_t i = 0; i < marker.size(); ++i) text[i] = b.rule("text-" + std::to_string(i));
    for (std::size_t i = 0; i < marker.size(); ++i) {
      b.add(text[i], {});  // complete here
      std::map<std::size_t, std::bitset<256>> by_next;
      for (int c = 0; c < 256; ++c) by_next[marker_advance(marker, i, static_cast<unsigned char>(c))].set(std::size_t(c));
      for (const auto& [next, bytes] : by_next)
        b.add(text[i], {b.bytes(bytes), grammar_builder::ref(next == marker.size() ? block : text[next])});
    }
    return text[0];
  }
};

// Hermes, Mistral and Granite: calls may come anywhere in the text, after their marker.
std::int32_t marked_calls(tool_rules& t, bool parallel, std::string_view format) {
  auto& b = t.b;
  const bool hermes = format == "hermes";
  const std::string_view marker = hermes ? "<tool_call>" : format == "granite" ? "<|tool_call|>" : "[TOOL_CALLS]";
  const std::int32_t block = b.rule("block");
  const std::int32_t start = t.watching(marker, block);
  const std::int32_t call = t.call("arguments");
  element_seq body;
  if (hermes) {  // <tool_call> "\n"? call "\n"? </tool_call>: one call per block
    const std::int32_t newline = b.rule("newline");
    b.add(newline, {});
    b.add(newline, {b.byte('\n')});
    body = {grammar_builder::ref(newline), grammar_builder::ref(call), grammar_builder::ref(newline)};
    b.literal(body, "</tool_call>");
  } else {  // [TOOL_CALLS] [call, call, ...] (Granite's marker: <|tool_call|>)
    body = {grammar_builder::ref(t.spaces()), b.byte('['), grammar_builder::ref(t.spaces()),
            grammar_builder::ref(t.items(call, ',', parallel)), grammar_builder::ref(t.spaces()), b.byte(']')};
  }
  // After the block: more text and calls, or with one call allowed only whitespace.
  body.push_back(grammar_builder::ref(parallel ? start : t.spaces()));
  b.add(block, std::move(body));
  return start;
}

// DeepSeek: calls may come anywhere in the text, in a block of their own markers; each names its
// tool outside the JSON, as V3 and R1 write it (fenced) or as V3.1 does (runtime/chat/deepseek_calls.h).
std::int32_t deepseek_calls(tool_rules& t, bool parallel) {
  auto& b = t.b;
  const std::int32_t block = b.rule("block");
  const std::int32_t start = t.watching("<｜tool▁calls▁begin｜>", block);
  const std::int32_t call = b.rule("call");
  for (const auto& c : t.doc["calls"]) {
    const std::string name = c.at("name").get<std::string>(), def = c.value("def", "");
    const std::int32_t arguments = def.empty() ? t.schemas.any_object() : t.schemas.at("#/$defs/" + def);
    element_seq v3, v31;
    b.literal(v3, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n");
    v3.push_back(grammar_builder::ref(arguments));
    b.literal(v3, "\n```<｜tool▁call▁end｜>");
    b.add(call, std::move(v3));
    b.literal(v31, "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>");
    v31.push_back(grammar_builder::ref(arguments));
    b.literal(v31, "<｜tool▁call▁end｜>");
    b.add(call, std::move(v31));
  }
  std::int32_t calls = call;
  if (parallel) {  // call ("\n"? call)*
    const std::int32_t newline = b.rule("newline");
    b.add(newline, {});
    b.add(newline, {b.byte('\n')});
    const std::int32_t more = b.rule("more-calls");
    b.add(more, {});
    b.add(more, {grammar_builder::ref(newline), grammar_builder::ref(call), grammar_builder::ref(more)});
    calls = b.rule("calls");
    b.add(calls, {grammar_builder::ref(call), grammar_builder::ref(more)});
  }
  element_seq body{grammar_builder::ref(calls)};
  b.literal(body, "<｜tool▁calls▁end｜>");
  body.push_back(grammar_builder::ref(parallel ? start : t.spaces()));
  b.add(block, std::move(body));
  return start;
}

// Llama 3: the answer is calls from its first non-space byte ('{' or <|python_tag|>), or text.
std::int32_t opening_calls(tool_rules& t, bool parallel) {
  auto& b = t.b;
  constexpr std::string_view tag = "<|python_tag|>";
  const std::int32_t calls = b.rule("answer-calls");  // the calls, then whitespace
  b.add(calls, {grammar_builder::ref(t.items(t.call("parameters"), ';', parallel)), grammar_builder::ref(t.spaces())});
  const std::int32_t free = b.rule("free");  // anything
  b.add(free, {});
  std::bitset<256> all;
  all.set();
  b.add(free, {b.bytes(all), grammar_builder::ref(free)});
  // The tag matched so far (k bytes): complete (the answer may stop there as text), on with the
  // tag's next byte, off into free text with any other.
  std::vector<std::int32_t> in_tag(tag.size() + 1);
  for (std::size_t k = 1; k <= tag.size(); ++k) in_tag[k] = b.rule("tag-" + std::to_string(k));
  for (std::size_t k = 1; k < tag.size(); ++k) {
    b.add(in_tag[k], {});
    b.add(in_tag[k], {b.byte(static_cast<unsigned char>(tag[k])), grammar_builder::ref(in_tag[k + 1])});
    std::bitset<256> other = all;
    other.reset(static_cast<unsigned char>(tag[k]));
    b.add(in_tag[k], {b.bytes(other), grammar_builder::ref(free)});
  }
  b.add(in_tag[tag.size()], {grammar_builder::ref(t.spaces()), grammar_builder::ref(calls)});
  const std::int32_t lead = b.rule("lead");  // only whitespace so far
  b.add(lead, {});
  b.add(lead, {b.bytes(whitespace()), grammar_builder::ref(lead)});
  b.add(lead, {grammar_builder::ref(calls)});
  b.add(lead, {b.byte(static_cast<unsigned char>(tag[0])), grammar_builder::ref(in_tag[1])});
  std::bitset<256> text_start = all & ~whitespace();
  text_start.reset('{');
  text_start.reset(static_cast<unsigned char>(tag[0]));
  b.add(lead, {b.bytes(text_start), grammar_builder::ref(free)});
  return lead;
}

}  // namespace

std::shared_ptr<const grammar> compile_tool_grammar(std::string_view source, const grammar_budget& budget) {
  const ojson doc = parse_ordered_json(source, "tool grammar");
  if (!doc.contains("calls") || !doc["calls"].is_array() || doc["calls"].empty())
    throw input_error("tool grammar: 'calls' must list at least one tool");
  const std::string format = doc.value("format", "hermes");
  if (format != "hermes" && format != "mistral" && format != "granite" && format != "deepseek_v3" && format != "llama3_json")
    throw input_error("tool grammar: format \"" + format + "\" is not one of hermes, mistral, granite, deepseek_v3, llama3_json");
  grammar_builder b(budget);
  json_schema_rules schemas(source, b);
  tool_rules t{b, schemas, doc};
  const bool parallel = doc.value("parallel", true);
  if (format == "llama3_json") return b.build(opening_calls(t, parallel));
  if (format == "deepseek_v3") return b.build(deepseek_calls(t, parallel));
  return b.build(marked_calls(t, parallel, format));
}

}  // namespace troupe::structured
