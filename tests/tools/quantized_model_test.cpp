// Quantized weights end to end, as a user gets them: `troupe model quantize` writes a folder,
// every command loads it like any other, and the quality gate measures what each format costs on
// the committed model's held-out text (Q8_0 within 1% of f16, Q4_0 within 8%, int8 within 1%).
// Folders that do not match their quantization_config are errors naming the tensor or key.
#define BOOST_TEST_MODULE quantized_model
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "tests/support/process.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const std::string source = TROUPE_SOURCE_DIR;

test::command_result run_troupe(const std::string& args) {
  return test::run_command("cd " + source + " && " + std::string(TROUPE_BINARY_DIR) + "/troupe " + args + " 2>&1");
}

// A fresh folder of this test's own (removed when the test ends).
struct scratch {
  fs::path dir = fs::temp_directory_path() / ("troupe-quant-test-" + std::to_string(::getpid()));
  scratch() { fs::create_directories(dir); }
  ~scratch() { fs::remove_all(dir); }
};

double perplexity(const std::string& model) {
  const auto r = run_troupe("eval perplexity --model " + model + " --text models/kjv/heldout.txt --json");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  return nlohmann::json::parse(r.output.substr(r.output.find('{')))["perplexity"].get<double>();
}

std::string quantize(const scratch& s, const std::string& type) {
  const std::string out = (s.dir / type).string();
  const auto r = run_troupe("model quantize --type " + type + " --model models/kjv --out " + out);
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  // Progress counts the model's tensors (it once printed tensor counts as "0.00/0.00 GB").
  const auto at = r.output.find("quantize: 100% (");
  BOOST_TEST_REQUIRE(at != std::string::npos, r.output);
  unsigned done = 0, total = 0;
  char unit[16] = {};
  BOOST_TEST(std::sscanf(r.output.c_str() + at, "quantize: 100%% (%u/%u %15[a-z])", &done, &total, unit) == 3, r.output);
  BOOST_TEST((done == total && total > 0 && std::string(unit) == "tensors"), r.output);
  return out;
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j;
  {
    std::ifstream in(dir + "/config.json");
    j = nlohmann::json::parse(in);
  }
  f(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_format_costs_little_perplexity_and_reads_fewer_bytes) {
  scratch s;
  const double f16 = perplexity("models/kjv");
  const auto f16_bytes = fs::file_size(source + "/models/kjv/model.safetensors");
  struct want { const char* type; double max_rise; double max_size; };
  for (const want w : {want{"q8_0", 0.01, 0.65}, want{"q4_0", 0.08, 0.45}, want{"int8", 0.01, 0.65}}) {
    const std::string dir = quantize(s, w.type);
    const double p = perplexity(dir);
    BOOST_TEST_MESSAGE(w.type << ": perplexity " << p << " (f16 " << f16 << ")");
    BOOST_TEST(std::abs(p - f16) / f16 <= w.max_rise, w.type << ": " << p << " vs f16 " << f16);
    const auto bytes = fs::file_size(dir + "/model.safetensors");
    BOOST_TEST(double(bytes) <= w.max_size * double(f16_bytes), w.type << ": " << bytes << " bytes vs " << f16_bytes);
    // The tokenizer and chat template came along: the quantized model serves chat prompts.
    BOOST_TEST(fs::exists(dir + "/tokenizer.json"));
    const auto g = run_troupe("generate --model " + dir + " --prompt \"In the beginning\" --max-tokens 8 --temperature 0 --json");
    BOOST_TEST(g.status == 0, g.output);
  }
}

BOOST_AUTO_TEST_CASE(bad_requests_and_mismatched_folders_are_errors_naming_what_is_wrong) {
  scratch s;
  auto expect = [](const test::command_result& r, const std::string& words) {
    BOOST_TEST(r.status != 0, r.output);
    BOOST_TEST(r.output.find(words) != std::string::npos, "wanted '" << words << "' in: " << r.output);
  };
  expect(run_troupe("model quantize --type q5_1 --model models/kjv --out " + (s.dir / "x").string()), "unknown --type 'q5_1'");
  expect(run_troupe("model quantize --model models/kjv --out " + (s.dir / "x").string()), "--type");
  // A GGUF file carries its own quantization: quantize reads Hugging Face folders only.
  const std::string gguf = (s.dir / "model.gguf").string();
  std::ofstream(gguf) << "GGUF";
  expect(run_troupe("model quantize --type q4_0 --model " + gguf + " --out " + (s.dir / "x").string()),
         "is a GGUF file; model quantize reads a Hugging Face model folder");
  const std::string q8 = quantize(s, "q8_0");
  expect(run_troupe("model quantize --type q4_0 --model " + q8 + " --out " + (s.dir / "again").string()), "already quantized (q8_0)");
  expect(run_troupe("model quantize --type q4_0 --model models/kjv --out " + q8), "already holds a model");

  // The config says q4_0 but the rows are q8_0's: the first projection's shape is wrong.
  edit_config(q8, [](nlohmann::json& j) { j["quantization_config"]["weight_type"] = "q4_0"; });
  expect(run_troupe("eval perplexity --model " + q8 + " --text models/kjv/heldout.txt"), "model.layers.0.self_attn.q_proj.weight' has shape [256, 272]");
  // int8 wants I8 rows.
  edit_config(q8, [](nlohmann::json& j) { j["quantization_config"]["weight_type"] = "int8"; });
  expect(run_troupe("eval perplexity --model " + q8 + " --text models/kjv/heldout.txt"), "has dtype U8; a int8 model stores its projections as I8");
  // Someone else's quantization is refused, not misread.
  edit_config(q8, [](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}}; });
  expect(run_troupe("eval perplexity --model " + q8 + " --text models/kjv/heldout.txt"), "quantization_config.quant_method is \"gptq\"");
  edit_config(q8, [](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", "q8_0"}, {"group_size", 64}}; });
  expect(run_troupe("eval perplexity --model " + q8 + " --text models/kjv/heldout.txt"), "unknown key 'group_size'");
  // And a plain folder whose config claims quantization.
  const std::string plain = (s.dir / "plain").string();
  fs::create_directories(plain);
  for (const auto& e : fs::directory_iterator(source + "/models/kjv")) fs::copy_file(e.path(), plain + "/" + e.path().filename().string());
  edit_config(plain, [](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", "q4_0"}}; });
  expect(run_troupe("eval perplexity --model " + plain + " --text models/kjv/heldout.txt"), "has dtype F16; a q4_0 model stores its projections as U8");
}
