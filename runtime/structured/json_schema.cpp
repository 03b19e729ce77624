#include "runtime/structured/json_schema.h"

#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/structured/regex.h"

namespace troupe::structured {

namespace {

using ojson = nlohmann::ordered_json;
using element = grammar::element;
using sequence = std::vector<element>;

constexpr long long max_digits_value = 999'999'999'999'999LL;  // 15 digits: exact in a double
constexpr int max_schema_depth = 64;

// ---- whole-number ranges as regular expressions ----

// Digit strings of one length between lo and hi (leading zeros allowed: these are suffixes).
void fixed_range(const std::string& lo, const std::string& hi, const std::string& prefix, std::vector<std::string>& out) {
  if (lo.empty()) {
    out.push_back(prefix);
    return;
  }
  if (lo[0] == hi[0]) {
    fixed_range(lo.substr(1), hi.substr(1), prefix + lo[0], out);
    return;
  }
  const std::size_t rest = lo.size() - 1;
  const std::string zeros(rest, '0'), nines(rest, '9');
  char from = lo[0], to = hi[0];
  if (lo.substr(1) != zeros) {
    fixed_range(lo.substr(1), nines, prefix + lo[0], out);
    ++from;
  }
  const bool hi_whole = hi.substr(1) == nines;
  if (!hi_whole) --to;
  if (from <= to) {
    std::string r = prefix + (from == to ? std::string(1, from) : std::string("[") + from + "-" + to + "]");
    for (std::size_t i = 0; i < rest; ++i) r += "[0-9]";
    out.push_back(r);
  }
  if (!hi_whole) fixed_range(zeros, hi.substr(1), prefix + hi[0], out);
}

// Non-negative whole numbers in [a, b], written without leading zeros.
void natural_range(long long a, long long b, std::vector<std::string>& out) {
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  if (sa.size() < sb.size()) {
    long long top = 9;
    for (std::size_t i = 1; i < sa.size(); ++i) top = top * 10 + 9;
    natural_range(a, top, out);
    natural_range(top + 1, b, out);
    return;
  }
  fixed_range(sa, sb, "", out);
}

// A pattern for the whole numbers in [lo, hi].
std::string integer_range(long long lo, long long hi) {
  std::vector<std::string> alts;
  if (lo < 0) {  // -m for m in [max(1, -hi), -lo]
    std::vector<std::string> neg;
    natural_range(std::max(1LL, -hi), -lo, neg);
    for (auto& n : neg) alts.push_back("-" + n);
  }
  if (hi >= 0) natural_range(std::max(0LL, lo), hi, alts);
  std::string r = "(?:";
  for (std::size_t i = 0; i < alts.size(); ++i) r += (i ? "|" : "") + alts[i];
  return r + ")";
}

// ---- the compiler ----

class compiler {
 public:
  compiler(const ojson& root, grammar_builder& b) : root_(root), b_(b) {}

  std::int32_t value_rule(const ojson& s, const std::string& path, int depth);
  std::int32_t any_value();
  std::int32_t any_object();
  std::int32_t at(const std::string& ref) { return ref_rule(ref, "", 0); }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    throw input_error("JSON Schema " + (path.empty() ? std::string("root") : path) + ": " + what);
  }
  std::int32_t named(const char* name) { return b_.rule(std::string("json-") + name); }
  std::int32_t ws();
  std::int32_t json_char();
  std::int32_t any_string();
  std::int32_t from_regex(const std::string& pattern, const std::string& path, bool in_string);
  std::int32_t literal_rule(const ojson& v);
  std::int32_t type_rule(const std::string& type, const ojson& s, const std::string& path, int depth);
  std::int32_t string_rule(const ojson& s, const std::string& path);
  std::int32_t number_rule(const ojson& s, const std::string& path, bool integer);
  std::int32_t object_rule(const ojson& s, const std::string& path, int depth);
  std::int32_t array_rule(const ojson& s, const std::string& path, int depth);
  std::int32_t ref_rule(const std::string& ref, const std::string& path, int depth);
  void check_keywords(const ojson& s, const std::string& path);

  const ojson& root_;
  grammar_builder& b_;
  std::map<std::string, std::int32_t> refs_;
  bool any_done_ = false;
};

std::int32_t compiler::ws() {
  const std::int32_t r = named("ws");
  if (!b_.has_alternatives(r)) {
    b_.add(r, {});
    b_.add(r, {b_.byte(' ')});
  }
  return r;
}

std::int32_t compiler::json_char() {
  const std::int32_t r = named("char");
  if (b_.has_alternatives(r)) return r;
  b_.add(r, {grammar_builder::ref(b_.char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true, "json-plain"))});
  sequence esc;
  b_.literal(esc, "\\");
  std::bitset<256> simple;
  for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  b_.add(r, {esc[0], b_.bytes(simple)});
  // \uXXXX, but not a surrogate (D800-DFFF): a lone one is not a character (parsers refuse it),
  // and a pair would count as two characters against maxLength where validators count one.
  std::bitset<256> hex, not_d, low;
  for (char c : std::string("0123456789abcdefABCDEF")) hex.set(static_cast<unsigned char>(c));
  not_d = hex;
  not_d.reset('d'), not_d.reset('D');
  for (char c : std::string("01234567")) low.set(static_cast<unsigned char>(c));
  std::bitset<256> d;
  d.set('d'), d.set('D');
  b_.add(r, {esc[0], b_.byte('u'), b_.bytes(not_d), b_.bytes(hex), b_.bytes(hex), b_.bytes(hex)});
  b_.add(r, {esc[0], b_.byte('u'), b_.bytes(d), b_.bytes(low), b_.bytes(hex), b_.bytes(hex)});
  return r;
}

std::int32_t compiler::any_string() {
  const std::int32_t r = named("string");
  if (b_.has_alternatives(r)) return r;
  const std::int32_t body = b_.repeat({grammar_builder::ref(json_char())}, 0, -1, "json-string-body");
  b_.add(r, {b_.byte('"'), grammar_builder::ref(body), b_.byte('"')});
  return r;
}

std::int32_t compiler::any_value() {
  const std::int32_t value = named("value");
  if (any_done_) return value;
  any_done_ = true;
  const std::int32_t obj = named("object"), arr = named("array"), w = ws();
  sequence t, f, n;
  b_.literal(t, "true");
  b_.literal(f, "false");
  b_.literal(n, "null");
  b_.add(value, {grammar_builder::ref(obj)});
  b_.add(value, {grammar_builder::ref(arr)});
  b_.add(value, {grammar_builder::ref(any_string())});
  b_.add(value, {grammar_builder::ref(number_rule(ojson::object(), "", false))});
  b_.add(value, t);
  b_.add(value, f);
  b_.add(value, n);
  // object ::= "{" ws ( member ( "," ws member )* )? "}"  member ::= string ":" ws value ws
  const std::int32_t member = named("member");
  b_.add(member, {grammar_builder::ref(any_string()), b_.byte(':'), grammar_builder::ref(w), grammar_builder::ref(value),
                  grammar_builder::ref(w)});
  const std::int32_t more_m = b_.repeat({b_.byte(','), grammar_builder::ref(w), grammar_builder::ref(member)}, 0, -1, "json-members");
  const std::int32_t members = named("members");
  b_.add(members, {});
  b_.add(members, {grammar_builder::ref(member), grammar_builder::ref(more_m)});
  b_.add(obj, {b_.byte('{'), grammar_builder::ref(w), grammar_builder::ref(members), b_.byte('}')});
  const std::int32_t item = named("item");
  b_.add(item, {grammar_builder::ref(value), grammar_builder::ref(w)});
  const std::int32_t more_i = b_.repeat({b_.byte(','), grammar_builder::ref(w), grammar_builder::ref(item)}, 0, -1, "json-items");
  const std::int32_t items = named("items");
  b_.add(items, {});
  b_.add(items, {grammar_builder::ref(item), grammar_builder::ref(more_i)});
  b_.add(arr, {b_.byte('['), grammar_builder::ref(w), grammar_builder::ref(items), b_.byte(']')});
  return value;
}

std::int32_t compiler::any_object() {
  any_value();
  return named("object");
}

std::int32_t compiler::from_regex(const std::string& pattern, const std::string& path, bool in_string) {
  try {
    return b_.add_dfa(compile_regex(pattern), "pattern", in_string);
  } catch (const input_error& e) {
    refuse(path, e.what());
  }
}

std::int32_t compiler::literal_rule(const ojson& v) {
  const std::int32_t r = b_.fresh("json-const");
  sequence seq;
  b_.literal(seq, v.dump(-1, ' ', false, nlohmann::detail::error_handler_t::strict));
  b_.add(r, seq);
  return r;
}

void compiler::check_keywords(const ojson& s, const std::string& path) {
  static const std::set<std::string> known = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
      "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
      "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
      // annotations: no effect on what validates
      "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
      "writeOnly"};
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!known.count(it.key())) refuse(path, "the keyword '" + it.key() + "' is not supported");
}

std::int32_t compiler::value_rule(const ojson& s, const std::string& path, int depth) {
  if (depth > max_schema_depth) refuse(path, "schemas nested deeper than " + std::to_string(max_schema_depth) + " levels");
  if (s.is_boolean()) {
    if (!s.get<bool>()) refuse(path, "the schema false matches nothing");
    return any_value();
  }
  if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
  check_keywords(s, path);
  if (s.contains("$ref")) {
    if (s.size() > 1)
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && it.key() != "description" && it.key() != "title" && it.key() != "$defs" &&
            it.key() != "definitions")
          refuse(path, "'$ref' beside '" + it.key() + "' is not supported");
    if (!s["$ref"].is_string()) refuse(path + "/$ref", "expected a string");
    return ref_rule(s["$ref"].get<std::string>(), path, depth);
  }
  if (s.contains("const")) return literal_rule(s["const"]);
  if (s.contains("enum")) {
    const ojson& e = s["enum"];
    if (!e.is_array() || e.empty()) refuse(path + "/enum", "expected a non-empty array");
    const std::int32_t r = b_.fresh("json-enum");
    for (const auto& v : e) b_.add(r, {grammar_builder::ref(literal_rule(v))});
    return r;
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      const ojson& alts = s[k];
      if (!alts.is_array() || alts.empty()) refuse(path + "/" + k, "expected a non-empty array of schemas");
      const std::int32_t r = b_.fresh("json-any-of");
      for (std::size_t i = 0; i < alts.size(); ++i)
        b_.add(r, {grammar_builder::ref(value_rule(alts[i], path + "/" + k + "/" + std::to_string(i), depth + 1))});
      return r;
    }
  if (s.contains("allOf")) {
    const ojson& all = s["allOf"];
    if (!all.is_array() || all.size() != 1) refuse(path + "/allOf", "only an allOf of exactly one schema is supported");
    return value_rule(all[0], path + "/allOf/0", depth + 1);
  }
  if (!s.contains("type")) {
    // Keywords of one type imply it (OpenAI's clients omit "type" beside "properties").
    if (s.contains("properties") || s.contains("additionalProperties")) return type_rule("object", s, path, depth);
    if (s.contains("items") || s.contains("prefixItems")) return type_rule("array", s, path, depth);
    if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
      return type_rule("string", s, path, depth);
    return any_value();
  }
  const ojson& t = s["type"];
  if (t.is_string()) return type_rule(t.get<std::string>(), s, path, depth);
  if (!t.is_array() || t.empty()) refuse(path + "/type", "expected a type name or a non-empty list of them");
  const std::int32_t r = b_.fresh("json-types");
  for (const auto& one : t) {
    if (!one.is_string()) refuse(path + "/type", "expected type names");
    b_.add(r, {grammar_builder::ref(type_rule(one.get<std::string>(), s, path, depth))});
  }
  return r;
}

std::int32_t compiler::type_rule(const std::string& type, const ojson& s, const std::string& path, int depth) {
  if (type == "object") return object_rule(s, path, depth);
  if (type == "array") return array_rule(s, path, depth);
  if (type == "string") return string_rule(s, path);
  if (type == "number") return number_rule(s, path, false);
  if (type == "integer") return number_rule(s, path, true);
  sequence seq;
  if (type == "boolean") {
    const std::int32_t r = b_.fresh("json-boolean");
    b_.literal(seq, "true");
    b_.add(r, seq);
    seq.clear();
    b_.literal(seq, "false");
    b_.add(r, seq);
    return r;
  }
  if (type == "null") {
    const std::int32_t r = b_.fresh("json-null");
    b_.literal(seq, "null");
    b_.add(r, seq);
    return r;
  }
  refuse(path + "/type", "unknown type '" + type + "'");
}

int count_of(const ojson& s, const char* key, const std::string& path, int fallback) {
  if (!s.contains(key)) return fallback;
  const ojson& v = s[key];
  if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 1'000'000)
    throw input_error("JSON Schema " + path + "/" + key + ": expected a whole number from 0 to 1000000");
  return int(v.get<long long>());
}

std::int32_t compiler::string_rule(const ojson& s, const std::string& path) {
  const int min = count_of(s, "minLength", path, 0), max = count_of(s, "maxLength", path, -1);
  if (max >= 0 && max < min) refuse(path, "maxLength is below minLength");
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("pattern") || s.contains("format")) {
    if (lengths) refuse(path, "minLength/maxLength beside pattern or format are not supported (put the length in the pattern)");
    std::string pattern;
    if (s.contains("pattern")) {
      if (s.contains("format")) refuse(path, "pattern and format together are not supported");
      if (!s["pattern"].is_string()) refuse(path + "/pattern", "expected a string");
      pattern = s["pattern"].get<std::string>();
      // JSON Schema searches: an unanchored end may be followed (or preceded) by anything.
      if (pattern.empty() || pattern[0] != '^') pattern = "(?:.|\\s)*(?:" + pattern + ")";
      if (pattern.back() != '$' || (pattern.size() > 1 && pattern[pattern.size() - 2] == '\\')) pattern = "(?:" + pattern + ")(?:.|\\s)*";
    } else {
      if (!s["format"].is_string()) refuse(path + "/format", "expected a string");
      static const std::map<std::string, std::string> formats = {
          {"date", "[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"},
          {"time", "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
          {"date-time",
           "[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
           "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
          {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
          {"email", "[a-zA-Z0-9_+-]{1,32}(?:\\.[a-zA-Z0-9_+-]{1,32}){0,3}@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?"
                    "(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?){0,3}\\.[a-zA-Z]{2,8}"},
          {"ipv4", "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"},
          {"hostname", "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?){0,4}"},
          {"uri", "https?://[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?){0,4}"
                  "(?:/[a-zA-Z0-9._~-]{0,32}){0,8}"},
      };
      auto f = formats.find(s["format"].get<std::string>());
      if (f == formats.end()) refuse(path + "/format", "the format '" + s["format"].get<std::string>() + "' is not supported");
      pattern = f->second;
    }
    const std::int32_t r = b_.fresh("json-pattern-string");
    b_.add(r, {b_.byte('"'), grammar_builder::ref(from_regex(pattern, path + "/pattern", true)), b_.byte('"')});
    return r;
  }
  if (!lengths) return any_string();
  const std::int32_t body = b_.repeat({grammar_builder::ref(json_char())}, min, max, "json-string-len");
  const std::int32_t r = b_.fresh("json-string");
  b_.add(r, {b_.byte('"'), grammar_builder::ref(body), b_.byte('"')});
  return r;
}

// The bound `key` as a whole number, if given; refused when it has a fraction.
std::optional<long long> bound(const ojson& s, const char* key, const std::string& path) {
  if (!s.contains(key)) return std::nullopt;
  const ojson& v = s[key];
  if (!v.is_number()) throw input_error("JSON Schema " + path + "/" + key + ": expected a number");
  const double d = v.get<double>();
  if (d != std::floor(d) || std::fabs(d) > double(max_digits_value))
    throw input_error("JSON Schema " + path + "/" + key + ": only whole-number bounds within 15 digits are supported");
  return (long long)d;
}

std::int32_t compiler::number_rule(const ojson& s, const std::string& path, bool integer) {
  auto lo = bound(s, "minimum", path), hi = bound(s, "maximum", path);
  if (auto x = bound(s, "exclusiveMinimum", path)) lo = std::max(lo.value_or(*x + 1), *x + 1);
  if (auto x = bound(s, "exclusiveMaximum", path)) hi = std::min(hi.value_or(*x - 1), *x - 1);
  const bool bounded = lo || hi;
  const long long a = lo.value_or(-max_digits_value), z = hi.value_or(max_digits_value);
  if (a > z) refuse(path, "the bounds leave no number");
  std::string pattern = bounded ? integer_range(a, z) : "-?(?:0|[1-9][0-9]{0,14})";
  if (!integer) {
    if (!bounded) {
      pattern += "(?:\\.[0-9]{1,15})?(?:[eE][-+]?[0-9]{1,2})?";  // below 1e100: a double everywhere
    } else {
      // A fraction only where it cannot cross a bound: n.f for n in [max(a, 0), z - 1], and
      // -m.f for m in [max(1, -z), -a - 1].
      std::vector<std::string> alts{pattern};
      if (z - 1 >= std::max(a, 0LL)) alts.push_back(integer_range(std::max(a, 0LL), z - 1) + "\\.[0-9]{1,15}");
      if (-a - 1 >= std::max(1LL, -z)) alts.push_back("-" + integer_range(std::max(1LL, -z), -a - 1) + "\\.[0-9]{1,15}");
      pattern.clear();
      for (std::size_t i = 0; i < alts.size(); ++i) pattern += (i ? "|" : "") + alts[i];
    }
  }
  if (!bounded) {
    const std::int32_t r = named(integer ? "integer" : "number");
    if (b_.has_alternatives(r)) return r;
    b_.add(r, {grammar_builder::ref(from_regex(pattern, path, false))});
    return r;
  }
  return from_regex(pattern, path, false);
}

std::int32_t compiler::object_rule(const ojson& s, const std::string& path, int depth) {
  const std::int32_t w = ws();
  const ojson props = s.contains("properties") ? s["properties"] : ojson::object();
  if (!props.is_object()) refuse(path + "/properties", "expected an object");
  std::set<std::string> required, names;  // names: an ordered object's lookups are linear
  for (auto it = props.begin(); it != props.end(); ++it) names.insert(it.key());
  if (s.contains("required")) {
    if (!s["required"].is_array()) refuse(path + "/required", "expected an array of names");
    for (const auto& n : s["required"]) {
      if (!n.is_string()) refuse(path + "/required", "expected an array of names");
      if (!names.count(n.get<std::string>())) refuse(path + "/required", "'" + n.get<std::string>() + "' is not in properties");
      required.insert(n.get<std::string>());
    }
  }
  const ojson extra = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(props.empty());
  const std::int32_t r = b_.fresh("json-object");
  if (props.empty()) {  // a map: any keys, each value of the additionalProperties schema
    if (extra.is_boolean() && !extra.get<bool>()) {
      b_.add(r, {b_.byte('{'), b_.byte('}')});
      return r;
    }
    const std::int32_t value = value_rule(extra, path + "/additionalProperties", depth + 1);
    const std::int32_t member = b_.fresh("json-map-member");
    b_.add(member, {grammar_builder::ref(any_string()), b_.byte(':'), grammar_builder::ref(w), grammar_builder::ref(value)});
    const std::int32_t more = b_.repeat({b_.byte(','), grammar_builder::ref(w), grammar_builder::ref(member)}, 0, -1, "json-map");
    b_.add(r, {b_.byte('{'), b_.byte('}')});
    b_.add(r, {b_.byte('{'), grammar_builder::ref(member), grammar_builder::ref(more), b_.byte('}')});
    return r;
  }
  if (!extra.is_boolean()) refuse(path + "/additionalProperties", "a schema beside properties is not supported");
  // Properties in the schema's order; rest[i][c] is the members from i on, c: one came before
  // (so the next needs a comma).
  std::vector<std::pair<std::string, std::int32_t>> members;
  for (auto it = props.begin(); it != props.end(); ++it) {
    const std::int32_t v = value_rule(it.value(), path + "/properties/" + it.key(), depth + 1);
    const std::int32_t m = b_.fresh("json-prop");
    sequence seq;
    b_.literal(seq, ojson(it.key()).dump() + ":");
    seq.push_back(grammar_builder::ref(w));
    seq.push_back(grammar_builder::ref(v));
    b_.add(m, seq);
    members.emplace_back(it.key(), m);
  }
  const std::size_t n = members.size();
  std::vector<std::array<std::int32_t, 2>> rest(n + 1);
  for (std::size_t i = n + 1; i-- > 0;) {
    for (int c = 0; c < 2; ++c) {
      rest[i][std::size_t(c)] = b_.fresh("json-props");
      if (i == n) {
        b_.add(rest[i][std::size_t(c)], {});
        continue;
      }
      sequence with;
      if (c) with = {b_.byte(','), grammar_builder::ref(w)};
      with.push_back(grammar_builder::ref(members[i].second));
      with.push_back(grammar_builder::ref(rest[i + 1][1]));
      b_.add(rest[i][std::size_t(c)], with);
      if (!required.count(members[i].first)) b_.add(rest[i][std::size_t(c)], {grammar_builder::ref(rest[i + 1][std::size_t(c)])});
    }
  }
  b_.add(r, {b_.byte('{'), grammar_builder::ref(rest[0][0]), b_.byte('}')});
  return r;
}

std::int32_t compiler::array_rule(const ojson& s, const std::string& path, int depth) {
  const std::int32_t w = ws();
  std::vector<std::int32_t> prefix;
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) refuse(path + "/prefixItems", "expected an array of schemas");
    for (std::size_t i = 0; i < s["prefixItems"].size(); ++i)
      prefix.push_back(value_rule(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i), depth + 1));
  }
  const ojson items = s.contains("items") ? s["items"] : ojson(true);
  const bool more_allowed = !(items.is_boolean() && !items.get<bool>());
  const std::int32_t item = more_allowed ? value_rule(items, path + "/items", depth + 1) : -1;
  int min = count_of(s, "minItems", path, 0), max = count_of(s, "maxItems", path, -1);
  if (max >= 0 && max < min) refuse(path, "maxItems is below minItems");
  if (!more_allowed) {
    if (min > int(prefix.size())) refuse(path, "minItems asks for more items than prefixItems allows");
    max = max < 0 ? int(prefix.size()) : std::min(max, int(prefix.size()));
  }
  // tail(i): the items after the first i, which are out (so each starts with a comma). Past the
  // prefix and minItems every item is of the items schema and may stop: a repetition.
  auto item_at = [&](std::size_t i) { return i < prefix.size() ? prefix[i] : item; };
  const std::size_t fixed = std::max<std::size_t>(prefix.size(), std::size_t(min));
  // Built from the right (no recursion: minItems may be large).
  const std::size_t top = std::max<std::size_t>(fixed, 1);
  std::vector<std::int32_t> tail(top + 1, -1);
  tail[top] = b_.fresh("json-array-tail");
  const int room = max < 0 ? -1 : std::max(0, max - int(top));
  if (more_allowed && room != 0)
    b_.add(tail[top], {grammar_builder::ref(b_.repeat({b_.byte(','), grammar_builder::ref(w), grammar_builder::ref(item)}, 0,
                                                      room, "json-array-more"))});
  else
    b_.add(tail[top], {});
  for (std::size_t i = top; i-- > 1;) {
    tail[i] = b_.fresh("json-array-tail");
    if (max < 0 || int(i) < max)
      b_.add(tail[i], {b_.byte(','), grammar_builder::ref(w), grammar_builder::ref(item_at(i)), grammar_builder::ref(tail[i + 1])});
    if (int(i) >= min) b_.add(tail[i], {});
  }
  const std::int32_t r = b_.fresh("json-array");
  if (min == 0) b_.add(r, {b_.byte('['), b_.byte(']')});
  if (max != 0 && (more_allowed || !prefix.empty()))
    b_.add(r, {b_.byte('['), grammar_builder::ref(item_at(0)), grammar_builder::ref(tail[1]), b_.byte(']')});
  return r;
}

std::int32_t compiler::ref_rule(const std::string& ref, const std::string& path, int depth) {
  auto it = refs_.find(ref);
  if (it != refs_.end()) return it->second;
  const ojson* target = nullptr;
  if (ref == "#") target = &root_;
  for (const char* where : {"#/$defs/", "#/definitions/"}) {
    const std::string p = where;
    if (ref.rfind(p, 0) != 0) continue;
    const std::string name = ref.substr(p.size());
    const std::string key = p.substr(2, p.size() - 3);
    if (root_.contains(key) && root_[key].is_object() && root_[key].contains(name)) target = &root_[key][name];
  }
  if (!target) refuse(path + "/$ref", "'" + ref + "' is not '#' or a name under #/$defs or #/definitions of this schema");
  const std::int32_t r = b_.fresh("json-ref");
  refs_.emplace(ref, r);  // before compiling the target: a recursive reference finds this rule
  b_.add(r, {grammar_builder::ref(value_rule(*target, ref.substr(1), depth + 1))});
  return r;
}

// A schema's text as a document: too deep or not JSON is an input_error.
ojson parse_schema(std::string_view text) {
  return parse_ordered_json(text, "JSON Schema");
}

}  // namespace

std::shared_ptr<const grammar> compile_json_schema(std::string_view schema_text, const grammar_budget& budget) {
  const ojson schema = parse_schema(schema_text);
  grammar_builder b(budget);
  compiler c(schema, b);
  const std::int32_t root = b.rule("root");
  b.add(root, {grammar_builder::ref(c.value_rule(schema, "", 0))});
  return b.build(root);
}

namespace {
struct schema_document {  // a document and the compiler over it, kept together
  schema_document(ojson d, grammar_builder& b) : doc(std::move(d)), c(doc, b) {}
  ojson doc;
  compiler c;
};
}  // namespace

// (Type-erased: the compiler's type is private to this file.)
struct json_schema_rules::impl {
  std::shared_ptr<void> keep;
  std::function<std::int32_t(const std::string&)> at;
  std::function<std::int32_t()> any_object;
};

json_schema_rules::json_schema_rules(std::string_view text, grammar_builder& b) : impl_(std::make_unique<impl>()) {
  auto d = std::make_shared<schema_document>(parse_schema(text), b);
  impl_->at = [d](const std::string& ref) { return d->c.at(ref); };
  impl_->any_object = [d] { return d->c.any_object(); };
  impl_->keep = std::move(d);
}

json_schema_rules::~json_schema_rules() = default;
std::int32_t json_schema_rules::at(const std::string& ref) { return impl_->at(ref); }
std::int32_t json_schema_rules::any_object() { return impl_->any_object(); }

std::shared_ptr<const grammar> json_object_grammar() {
  static const std::shared_ptr<const grammar> g = [] {
    const ojson none = ojson::object();
    grammar_builder b;
    compiler c(none, b);
    const std::int32_t root = b.rule("root");
    b.add(root, {grammar_builder::ref(c.any_object())});
    return b.build(root);
  }();
  return g;
}

}  // namespace troupe::structured
