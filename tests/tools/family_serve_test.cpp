// Every model family served as a user would: `troupe serve` on a synthesized folder of the
// family and on the GGUF file Troupe writes of it, a completion through the OpenAI API from
// each, and the two answers the same (the GGUF carries the weights, the recipe's keys and the
// tokenizer across). What each family computes is checked against llama.cpp and PyTorch
// elsewhere (llama_cpp_reference_test, model_reference_test); this is the path a request takes.
#define BOOST_TEST_MODULE family_serve
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/model/gguf_export.h"
#include "runtime/model/synth.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-family-serve-" + std::to_string(::getpid()));
struct cleanup {
  ~cleanup() { fs::remove_all(scratch); }
} cleanup_at_exit;

// The completion `model` gives through `troupe serve`.
nlohmann::json complete(const std::string& model) {
  test::serve_process serve({std::string(TROUPE_SOURCE_DIR) + "/configs/local.toml", "--model", model});
  BOOST_TEST_REQUIRE(serve.port() != 0, model << " did not serve");
  const nlohmann::json body = {{"model", fs::path(model).filename().string()}, {"prompt", "In the beginning"},
                               {"max_tokens", 12},  {"temperature", 0},
                               {"ignore_eos", true}, {"repetition_penalty", 1.0}};
  const auto r = test::post_json(serve.port(), "/v1/completions", body);
  BOOST_TEST_REQUIRE(r.status == 200, model << ": " << r.body);
  return nlohmann::json::parse(r.body);
}

void serve_family(const std::string& arch, const std::string& preset = "tiny", int layers = 0) {
  const fs::path dir = scratch / arch;
  model::synth_options o;
  o.preset = preset;
  o.arch = arch;
  o.layers = layers;
  o.out = dir.string();
  model::synthesize(o);
  const std::string gguf = dir.string() + ".gguf";
  model::export_gguf({dir.string(), gguf, "f32"});
  const auto a = complete(dir.string()), b = complete(gguf);
  BOOST_TEST(a["usage"]["completion_tokens"] == 12);
  BOOST_TEST(a["choices"][0]["text"] == b["choices"][0]["text"], arch << ": " << a.dump() << " vs " << b.dump());
  BOOST_TEST(a["usage"] == b["usage"]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(llama) { serve_family("llama"); }
BOOST_AUTO_TEST_CASE(mistral) { serve_family("mistral"); }
BOOST_AUTO_TEST_CASE(qwen2) { serve_family("qwen2"); }
BOOST_AUTO_TEST_CASE(qwen3) { serve_family("qwen3"); }
BOOST_AUTO_TEST_CASE(gemma2) { serve_family("gemma2"); }
BOOST_AUTO_TEST_CASE(gemma3) { serve_family("gemma3", "tiny", 6); }
BOOST_AUTO_TEST_CASE(granite) { serve_family("granite"); }
BOOST_AUTO_TEST_CASE(olmo2) { serve_family("olmo2"); }
BOOST_AUTO_TEST_CASE(smollm3) { serve_family("smollm3", "tiny", 4); }
BOOST_AUTO_TEST_CASE(phi3) { serve_family("phi3"); }
BOOST_AUTO_TEST_CASE(mixtral) { serve_family("mixtral", "moe"); }
BOOST_AUTO_TEST_CASE(qwen3_moe) { serve_family("qwen3_moe", "moe"); }
