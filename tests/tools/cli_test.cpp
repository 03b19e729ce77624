// The troupe command as a user runs it: the main job through the runtime gives the engine's
// tokens, and bad input ends with a clear error and a non-zero exit, never a crash.
#define BOOST_TEST_MODULE cli
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "runtime/engine/engine.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;

namespace {

struct run_result {
  int status = -1;
  std::string out;  // stdout and stderr
};

run_result troupe_cmd(const std::string& args) {
  const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe " + args + " 2>&1");
  return {r.status, r.output};
}

}  // namespace

BOOST_AUTO_TEST_CASE(generate_with_the_default_topology_gives_the_engines_tokens) {
  const std::string dir = test::synth_model("small-llama-f32", test::preset("small"));
  const std::string config = std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml";
  run_result r = troupe_cmd("generate --config " + config + " --model " + dir +
                            " --prompt-ids 5,17,300,4000 --max-tokens 12 --ignore-eos --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.out);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  engine::engine e(test::small_model(), nullptr, {});
  engine::request req{"0", {5, 17, 300, 4000}, {}, {}, 0};
  req.params.temperature = 0;
  req.params.max_tokens = 12;
  req.params.ignore_eos = true;
  const auto expected = engine::generate_all(e, {req})[0];
  BOOST_TEST(j["outputs"][0]["output_ids"].get<std::vector<std::int32_t>>() == expected, boost::test_tools::per_element());
  BOOST_TEST(j["outputs"][0]["finish_reason"].get<std::string>() == "length");
}

BOOST_AUTO_TEST_CASE(bad_input_is_an_error_naming_what_was_wrong) {
  auto expect = [](const std::string& args, const std::string& needle) {
    run_result r = troupe_cmd(args);
    BOOST_TEST(r.status == 1, args << " -> " << r.out);
    BOOST_TEST(r.out.find(needle) != std::string::npos, args << " -> " << r.out);
  };
  expect("model synth --preset huge --out /tmp/x", "unknown --preset 'huge'");
  expect("generate --model /nonexistent/model --prompt hi", "/nonexistent/model/config.json: cannot open");
  expect("generate --config /nonexistent.toml", "/nonexistent.toml: cannot open");
  expect("generate --max-tokens many", "--max-tokens expects an integer");
  expect("generate --config " + std::string(TROUPE_SOURCE_DIR) + "/configs/sim-32.toml", "needs the distributed runtime");
  expect("bench engine", "--model DIR is required");
  const std::string three = std::string(TROUPE_SOURCE_DIR) + "/configs/three-local.toml";
  expect("node " + three + " --name nobody", "no node named \"nobody\"");
  expect("node " + three + " --name node-a --head 127.0.0.1:1 --model " + test::synth_model("tiny-llama-f32", test::preset("tiny")),
         "cannot reach the head at 127.0.0.1:1");
  run_result r = troupe_cmd("frobnicate");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out.find("unknown command 'frobnicate'") != std::string::npos);
}
