// The log's lines: text with bare words and quoted values, JSON objects with the same fields,
// levels filtered, names parsed.
#define BOOST_TEST_MODULE log
#include <boost/test/unit_test.hpp>

#include "runtime/common/log.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(text_and_json_lines_carry_the_same_fields) {
  const log::fields f = {{"id", "cmpl-1"}, {"trace", "abc:1/x"}, {"replicas", {"decode-0", "decode-1"}},
                         {"output_tokens", 24}, {"error", "no replica can take it"}};
  const double t = 1796046797.8135;  // 2026-11-30T13:53:17.813Z
  const std::string text = log::render(log::format::text, log::level::warn, "request_end", f, t);
  BOOST_TEST(text == "2026-11-30T13:53:17.813Z WARN request_end id=cmpl-1 trace=abc:1/x replicas=[\"decode-0\",\"decode-1\"] "
                     "output_tokens=24 error=\"no replica can take it\"");
  const auto j = nlohmann::json::parse(log::render(log::format::json, log::level::info, "request_end", f, t));
  BOOST_TEST(j["ts"] == "2026-11-30T13:53:17.813Z");
  BOOST_TEST(j["level"] == "info");
  BOOST_TEST(j["event"] == "request_end");
  BOOST_TEST(j["replicas"][1] == "decode-1");
  BOOST_TEST(j["output_tokens"] == 24);
  // A value with a newline or quote cannot start a forged line.
  const std::string forged = log::render(log::format::text, log::level::info, "x", {{"user", "a\n2026 INFO fake"}}, t);
  BOOST_TEST(forged.find('\n') == std::string::npos, forged);
}

BOOST_AUTO_TEST_CASE(levels_filter_and_parse) {
  log::configure(log::level::warn, log::format::text);
  BOOST_TEST(!log::enabled(log::level::info));
  BOOST_TEST(log::enabled(log::level::warn));
  BOOST_TEST(log::enabled(log::level::error));
  log::set_level(log::level::off);
  BOOST_TEST(!log::enabled(log::level::error));
  BOOST_TEST(!log::enabled(log::level::off));
  log::set_level(log::level::debug);
  BOOST_TEST(log::enabled(log::level::debug));
  BOOST_TEST((log::parse_level("warning") == log::level::warn));
  BOOST_TEST(!log::parse_level("loud").has_value());
  BOOST_TEST((log::parse_format("json") == log::format::json));
  BOOST_TEST(!log::parse_format("xml").has_value());
  BOOST_TEST(std::string(log::level_name(log::level::error)) == "error");
}
