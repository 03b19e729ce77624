// JSON Schema grammars: random sentences of each schema's grammar (random bytes among the ones
// the matcher allows) parse as JSON and satisfy the schema's constraints, checked here by hand
// per schema; properties come in the schema's order; bounds, patterns, formats and recursion
// hold; unsupported keywords and bombs are refused by name.
#define BOOST_TEST_MODULE json_schema
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/common/json.h"
#include "runtime/structured/json_schema.h"

using namespace troupe;
using namespace troupe::structured;
using json = nlohmann::ordered_json;

namespace {

// The bytes of a shortest way from `m` to a complete sentence (breadth first over the
// matcher's states), or nothing if there is none within 400 bytes.
std::optional<std::string> way_to_end(const grammar_matcher& m) {
  if (m.complete()) return std::string();
  std::vector<std::pair<grammar_matcher, std::string>> layer{{m, ""}};
  std::set<std::string> seen{m.key()};
  for (int depth = 0; depth < 400 && !layer.empty(); ++depth) {
    std::vector<std::pair<grammar_matcher, std::string>> next;
    for (const auto& [x, path] : layer)
      for (int b = 0; b < 256; ++b) {
        grammar_matcher c = x;
        if (!c.accept(static_cast<unsigned char>(b))) continue;
        if (c.complete()) return path + char(b);
        if (seen.insert(c.key()).second) next.emplace_back(std::move(c), path + char(b));
      }
    layer = std::move(next);
  }
  return std::nullopt;
}

// A random sentence: up to a random length, bytes drawn among those the matcher takes (it may
// stop wherever the sentence is complete); then a shortest way to the end, so that recursive
// grammars and patterns end. Empty if there was none.
std::string sample(const std::shared_ptr<const grammar>& g, std::mt19937& rng) {
  grammar_matcher m(g);
  std::string out;
  const std::size_t wander = rng() % 80;
  std::vector<grammar_matcher::stack> next;
  while (out.size() < wander) {
    if (m.complete() && (m.exhausted() || rng() % 4 == 0)) return out;
    std::vector<unsigned char> ok;
    for (int b = 0; b < 256; ++b)
      if (grammar_matcher::step(m.rules(), m.stacks(), static_cast<unsigned char>(b), next)) ok.push_back(static_cast<unsigned char>(b));
    if (ok.empty()) break;
    const unsigned char b = ok[rng() % ok.size()];
    BOOST_REQUIRE(m.accept(b));
    out += char(b);
  }
  const auto rest = way_to_end(m);
  if (!rest) return std::string();
  BOOST_REQUIRE(m.accept(*rest));
  return out + *rest;
}

// `n` sentences of the schema, each parsed and handed to `check`.
void each_sample(const std::string& schema, int n, const std::function<void(const json&)>& check) {
  const auto g = compile_json_schema(schema);
  std::mt19937 rng(11);
  int done = 0;
  for (int i = 0; i < n; ++i) {
    const std::string s = sample(g, rng);
    if (s.empty()) continue;
    json v;
    BOOST_REQUIRE_NO_THROW(v = json::parse(s));
    BOOST_TEST_CONTEXT(schema << " -> " << s) check(v);
    ++done;
  }
  BOOST_CHECK_MESSAGE(done >= n * 3 / 4, schema << ": " << done << " of " << n << " samples ended");
}

std::string error_of(const std::string& schema) {
  try {
    compile_json_schema(schema);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(objects_keep_required_properties_in_the_schemas_order) {
  each_sample(R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"},
                   "mid":{"type":"boolean"}},"required":["zeta","mid"],"additionalProperties":false})",
              30, [](const json& v) {
                BOOST_REQUIRE(v.is_object());
                BOOST_CHECK(v.contains("zeta") && v["zeta"].is_string());
                BOOST_CHECK(v.contains("mid") && v["mid"].is_boolean());
                if (v.contains("alpha")) BOOST_CHECK(v["alpha"].is_number_integer());
                BOOST_CHECK_EQUAL(v.begin().key(), "zeta");
                BOOST_CHECK_LE(v.size(), 3u);
              });
}

BOOST_AUTO_TEST_CASE(number_bounds_hold_for_integers_and_numbers) {
  for (const auto& range : std::vector<std::pair<long long, long long>>{{-120, 37}, {0, 9}, {5, 5}, {-7, -3}, {99, 1001}}) {
    const long long lo = range.first, hi = range.second;  // (named: lambdas below capture them)
    const std::string bounds = "\"minimum\":" + std::to_string(lo) + ",\"maximum\":" + std::to_string(hi);
    each_sample("{\"type\":\"integer\"," + bounds + "}", 30, [&](const json& v) {
      BOOST_REQUIRE(v.is_number_integer());
      BOOST_CHECK_GE(v.get<long long>(), lo);
      BOOST_CHECK_LE(v.get<long long>(), hi);
    });
    each_sample("{\"type\":\"number\"," + bounds + "}", 30, [&](const json& v) {
      BOOST_REQUIRE(v.is_number());
      BOOST_CHECK_GE(v.get<double>(), double(lo));
      BOOST_CHECK_LE(v.get<double>(), double(hi));
    });
  }
  each_sample(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":3})", 20, [](const json& v) {
    BOOST_CHECK(v.get<long long>() == 1 || v.get<long long>() == 2);
  });
  // Every value in a range is reachable: the range pattern is not too narrow.
  const auto g = compile_json_schema(R"({"type":"integer","minimum":-120,"maximum":1037})");
  for (long long x = -130; x <= 1050; ++x) {
    grammar_matcher m(g);
    const bool in = m.accept(std::to_string(x)) && m.complete();
    BOOST_CHECK_MESSAGE(in == (x >= -120 && x <= 1037), x);
  }
}

BOOST_AUTO_TEST_CASE(strings_keep_lengths_patterns_and_formats) {
  each_sample(R"({"type":"string","minLength":2,"maxLength":5})", 30, [](const json& v) {
    const std::string s = v.get<std::string>();
    std::size_t chars = 0;
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80;  // code points, as JSON Schema counts
    BOOST_CHECK(chars >= 2 && chars <= 5);
  });
  each_sample(R"({"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"})", 30, [](const json& v) {
    BOOST_CHECK(std::regex_match(v.get<std::string>(), std::regex("[A-Z]{3}-[0-9]{2,4}")));
  });
  each_sample(R"({"type":"string","pattern":"ab+c"})", 30, [](const json& v) {  // searched, not anchored
    BOOST_CHECK(std::regex_search(v.get<std::string>(), std::regex("ab+c")));
  });
  each_sample(R"({"type":"string","pattern":"^\"[\\\\]?$"})", 20, [](const json& v) {  // quote and backslash come out escaped
    BOOST_CHECK(v.get<std::string>() == "\"" || v.get<std::string>() == "\"\\");
  });
  each_sample(R"({"type":"string","format":"date-time"})", 20, [](const json& v) {
    BOOST_CHECK(std::regex_match(v.get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d))")));
  });
  each_sample(R"({"type":"string","format":"uuid"})", 20, [](const json& v) {
    BOOST_CHECK(std::regex_match(v.get<std::string>(), std::regex("[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")));
  });
}

BOOST_AUTO_TEST_CASE(arrays_enums_unions_and_recursive_refs) {
  each_sample(R"({"type":"array","items":{"enum":["red","green",3,null,{"a":[1]}]},"minItems":2,"maxItems":4})", 30,
              [](const json& v) {
                BOOST_REQUIRE(v.is_array());
                BOOST_CHECK(v.size() >= 2 && v.size() <= 4);
                for (const auto& x : v)
                  BOOST_CHECK(x == "red" || x == "green" || x == 3 || x.is_null() || x == json::parse(R"({"a":[1]})"));
              });
  each_sample(R"({"type":"array","prefixItems":[{"type":"integer"},{"const":"x"}],"items":false})", 30, [](const json& v) {
    BOOST_REQUIRE(v.is_array());
    BOOST_CHECK_LE(v.size(), 2u);
    if (v.size() > 0) BOOST_CHECK(v[0].is_number_integer());
    if (v.size() > 1) BOOST_CHECK_EQUAL(v[1], "x");
  });
  each_sample(R"({"anyOf":[{"type":"string","maxLength":3},{"type":["integer","null"]}]})", 30, [](const json& v) {
    BOOST_CHECK(v.is_string() || v.is_number_integer() || v.is_null());
  });
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string","maxLength":4},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["name","children"],
      "additionalProperties":false}},"$ref":"#/$defs/node"})";
  int deepest = 0;
  std::function<int(const json&)> check = [&](const json& v) {
    BOOST_REQUIRE(v.is_object());
    BOOST_REQUIRE(v.contains("name") && v.contains("children"));
    int d = 0;
    for (const auto& c : v["children"]) d = std::max(d, check(c));
    return d + 1;
  };
  each_sample(tree, 30, [&](const json& v) { deepest = std::max(deepest, check(v)); });
  BOOST_CHECK_GE(deepest, 2);  // recursion is followed
  each_sample(R"({"type":"object","additionalProperties":{"type":"integer"}})", 30, [](const json& v) {
    for (auto it = v.begin(); it != v.end(); ++it) BOOST_CHECK(it.value().is_number_integer());
  });
  // json_object: any object.
  const auto g = json_object_grammar();
  std::mt19937 rng(3);
  for (int i = 0; i < 30; ++i) {
    const std::string s = sample(g, rng);
    if (!s.empty()) BOOST_CHECK(json::parse(s).is_object());
  }
}

BOOST_AUTO_TEST_CASE(unsupported_keywords_and_bombs_are_refused_by_name) {
  BOOST_CHECK_NE(error_of(R"({"type":"object","properties":{"a":{"type":"string","contentEncoding":"base64"}}})")
                     .find("/properties/a: the keyword 'contentEncoding' is not supported"),
                 std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"type":"number","multipleOf":3})").find("'multipleOf'"), std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"type":"number","minimum":0.5})").find("whole-number bounds"), std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"$ref":"#/$defs/nope"})").find("'#/$defs/nope'"), std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"type":"strin"})").find("unknown type 'strin'"), std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"type":"object","properties":{},"required":["x"]})").find("'x' is not in properties"),
                 std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"type":"string","format":"color"})").find("format 'color'"), std::string::npos);
  BOOST_CHECK_NE(error_of("{\"type\":").find("not valid JSON"), std::string::npos);
  BOOST_CHECK_NE(error_of(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("left-recursive"),
                 std::string::npos);
  // Bombs: huge lengths and item counts, enormous enums, deep nesting.
  BOOST_CHECK_NE(error_of(R"({"type":"array","items":{"type":"string","minLength":900000}})")
                     .find("too large"),
                 std::string::npos);
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type":"array","items":)";
  deep += "true";
  for (int i = 0; i < 100; ++i) deep += "}";
  BOOST_CHECK_NE(error_of(deep).find("nested deeper"), std::string::npos);
  std::string pattern_bomb = R"({"type":"string","pattern":"^(a|b|c|d)*a(a|b|c|d){30}$"})";
  BOOST_CHECK_NE(error_of(pattern_bomb), "");
}

BOOST_AUTO_TEST_CASE(every_schema_of_the_corpus_compiles_and_its_sentences_parse) {
  // tests/structured/corpus/schemas.json: the corpus the Node test validates outputs of with ajv.
  std::ifstream in(std::string(TROUPE_SOURCE_DIR) + "/tests/structured/corpus/schemas.json");
  const json corpus = json::parse(in);
  BOOST_TEST_REQUIRE(corpus.size() >= 200u);
  std::mt19937 rng(5);
  std::size_t i = 0;
  for (const auto& entry : corpus) {
    BOOST_TEST_CONTEXT(entry["name"].get<std::string>()) {
      std::shared_ptr<const grammar> g;
      BOOST_REQUIRE_NO_THROW(g = compile_json_schema(entry["schema"].dump()));
      if (i++ % 2) continue;  // every schema compiles; every other one is sampled (the Node test samples them all)
      const std::string s = sample(g, rng);
      if (!s.empty()) BOOST_CHECK_NO_THROW((void)json::parse(s));
    }
  }
}

// A 100,000-property schema (2.9 MB) took 27-31 s before "grammar is too large": nlohmann's
// ordered parse looks each key up in its object as it inserts it. The schema's own parse is
// now linear, and the budget refuses it by name as the grammar is built.
BOOST_AUTO_TEST_CASE(a_schema_of_a_hundred_thousand_properties_is_refused_by_its_budget) {
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 100000; ++i) schema += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(":{"type":"string"})";
  schema += "}}";
  const std::string e = error_of(schema);
  BOOST_TEST(e.find("the grammar is too large") != std::string::npos, e.substr(0, 200));
}

// parse_ordered_json: each object's keys in the text's order, a key given twice in its first
// place with its last value (as nlohmann::json keeps the last), and errors naming the source.
BOOST_AUTO_TEST_CASE(the_ordered_parse_keeps_the_texts_order_in_linear_time) {
  const auto j = troupe::parse_ordered_json(R"({"z":1,"a":{"y":[1,{"k":null}],"b":true},"m":"s","z":2,"f":1.5,"u":18446744073709551615})", "t");
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  BOOST_TEST(keys == (std::vector<std::string>{"z", "a", "m", "f", "u"}), boost::test_tools::per_element());
  BOOST_TEST(j["z"] == 2);
  BOOST_TEST(j["a"].begin().key() == "y");
  BOOST_TEST(j["a"]["y"][1]["k"].is_null());
  BOOST_TEST(j["f"] == 1.5);
  BOOST_TEST(j["u"].get<std::uint64_t>() == 18446744073709551615ull);
  BOOST_TEST(j.dump() == nlohmann::ordered_json::parse(R"({"z":2,"a":{"y":[1,{"k":null}],"b":true},"m":"s","f":1.5,"u":18446744073709551615})").dump());
  try {
    troupe::parse_ordered_json(R"({"a":)", "the body");
    BOOST_FAIL("a truncated text parsed");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find("the body: not valid JSON") == 0, e.what());
  }
  std::string big = "{";
  for (int i = 100000; i-- > 0;) big += (i != 99999 ? "," : "") + std::string("\"k") + std::to_string(i) + "\":" + std::to_string(i);
  big += "}";
  const auto b = troupe::parse_ordered_json(big, "big");
  BOOST_TEST(b.size() == 100000u);
  BOOST_TEST(b.begin().key() == "k99999");
  BOOST_TEST(b.back() == 0);
}
