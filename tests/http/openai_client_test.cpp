// OpenAI's official client library (npm "openai", run with Node) against `troupe serve`:
// completions and chat, streaming and not, and an error (tests/http/openai-client).
#define BOOST_TEST_MODULE openai_client
#include <boost/test/unit_test.hpp>

#include <filesystem>

#include "tests/support/http_client.h"
#include "tests/support/models.h"

using namespace troupe;

BOOST_AUTO_TEST_CASE(the_official_openai_node_client_works_against_troupe_serve) {
  const std::string dir = std::string(TROUPE_SOURCE_DIR) + "/tests/http/openai-client";
  BOOST_TEST_REQUIRE(std::filesystem::exists(dir + "/node_modules/openai"),
                     "run scripts/install-deps.sh: it installs the client with npm ci in " << dir);
  const std::string model = test::synth_model("small-llama-f32", test::preset("small"));
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0);
  const auto r = test::run_command("cd " + dir + " && node client_test.mjs http://127.0.0.1:" + std::to_string(serve.port()) +
                                   " small-llama-f32 2>&1");
  BOOST_TEST_MESSAGE(r.output);
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find("openai client ok") != std::string::npos, r.output);
}
