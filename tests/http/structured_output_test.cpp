// Structured output through `troupe serve` on the default model, judged by independent tools
// (tests/http/structured-output: ajv over the schema corpus, JavaScript regular expressions,
// OpenAI's Node client and its chat.completions.parse helper, streamed and not).
#define BOOST_TEST_MODULE structured_output
#include <boost/test/unit_test.hpp>

#include <filesystem>

#include "tests/support/http_client.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(every_completed_output_validates_with_independent_tools) {
  const std::string src = TROUPE_SOURCE_DIR;
  const std::string dir = src + "/tests/http/structured-output";
  BOOST_TEST_REQUIRE(std::filesystem::exists(dir + "/node_modules/ajv"),
                     "run scripts/install-deps.sh: it installs ajv and the client with npm ci in " << dir);
  test::serve_process serve({src + "/configs/local.toml", "--model", src + "/models/kjv"});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto r = test::run_command("cd " + dir + " && node structured_test.mjs http://127.0.0.1:" + std::to_string(serve.port()) +
                                   " kjv " + src + "/tests/structured/corpus/schemas.json 2>&1");
  BOOST_TEST_MESSAGE(r.output);
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("structured output ok") != std::string::npos, r.output);
}
