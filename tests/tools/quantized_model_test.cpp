// Quantized weights end to end, as a user gets them: `troupe model quantize` writes a folder,
// every command loads it like any other, and the quality gate measures what each format costs on
// the committed model's held-out text (Q8_0 within 1% of f16, Q4_0 within 8%, int8 within 1%,
// llama.cpp's Q4_K_M and Q6_K mixes within 3% and 1%). A mix's projections hold the bytes of the
// same mix's GGUF file. Folders that do not match their quantization_config are errors naming
// the tensor or key.
#define BOOST_TEST_MODULE quantized_model
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "runtime/model/gguf.h"
#include "runtime/model/safetensors.h"
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
  for (const want w : {want{"q8_0", 0.01, 0.65}, want{"q4_0", 0.08, 0.45}, want{"int8", 0.01, 0.65}, want{"q4_k_m", 0.03, 0.5},
                       want{"q6_k", 0.01, 0.6}}) {
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

// A folder in a mix holds, projection by projection, the format and the bytes the same mix's GGUF
// file holds (q_proj and k_proj excepted: GGUF interleaves their rows); the file is cross-checked
// against llama.cpp's layouts by gguf_reference_test. The metadata names each format.
BOOST_AUTO_TEST_CASE(a_mix_in_a_folder_holds_the_projections_of_the_same_mix_in_gguf) {
  scratch s;
  const std::string dir = quantize(s, "q4_k_m"), gguf = (s.dir / "q4_k_m.gguf").string();
  const auto r = run_troupe("model quantize --type q4_k_m --model models/kjv --out " + gguf);
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  const model::safetensors_file folder(dir + "/model.safetensors");
  const model::gguf_file file(gguf);
  int compared = 0, q6 = 0;
  for (const auto& [name, t] : folder.tensors()) {
    const bool projection = t.quant || t.kquant;
    BOOST_TEST(projection == (name.find("_proj.weight") != std::string::npos), name);
    if (!projection || name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos) continue;
    std::string g = name;  // model.layers.N.<part>.weight -> blk.N.<gguf part>.weight
    for (auto [hf, gg] : {std::pair{"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"mlp.gate_proj", "ffn_gate"},
                          {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}})
      if (auto at = g.find(hf); at != std::string::npos) g.replace(at, std::string(hf).size(), gg);
    g.replace(0, std::string("model.layers.").size(), "blk.");
    const auto& want = file.tensors().at(g);
    const std::string format = t.kquant ? kernels::kquant_name(*t.kquant) : kernels::quant_name(*t.quant);
    std::string gguf_format = model::ggml_type_name(std::uint32_t(want.type));
    for (auto& c : gguf_format) c = char(std::tolower(c));
    BOOST_TEST(format == gguf_format, name);
    BOOST_TEST_REQUIRE(t.bytes == want.bytes, name);
    BOOST_TEST(std::memcmp(t.data, want.data, t.bytes) == 0, name);
    ++compared;
    q6 += format == "q6_k";
  }
  BOOST_TEST(compared == 6 * 5);  // models/kjv: six layers
  BOOST_TEST(q6 == 4);            // v_proj and down_proj of the layers given more bits (2 and 5 of 6)
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
  // A mix's projection whose format the metadata misnames (same length: the header keeps its size).
  const std::string km = quantize(s, "q4_k_m");
  {
    std::fstream f(km + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    std::string head(64 * 1024, '\0');
    f.read(head.data(), std::streamsize(head.size()));
    const std::string entry = "\"troupe.format:model.layers.0.self_attn.q_proj.weight\":\"q4_k\"";
    const auto at = head.find(entry);
    BOOST_TEST_REQUIRE(at != std::string::npos);
    f.clear();
    f.seekp(std::streamoff(at + entry.size() - 5));  // the quoted name's letters
    f.write("q9_k", 4);
  }
  expect(run_troupe("eval perplexity --model " + km + " --text models/kjv/heldout.txt"),
         "tensor 'model.layers.0.self_attn.q_proj.weight' has format 'q9_k' in the metadata");
  expect(run_troupe("model quantize --type q4_k_m --model " + km + " --out " + (s.dir / "again").string()), "already quantized (q4_k_m)");
  // And a plain folder whose config claims quantization.
  const std::string plain = (s.dir / "plain").string();
  fs::create_directories(plain);
  for (const auto& e : fs::directory_iterator(source + "/models/kjv")) fs::copy_file(e.path(), plain + "/" + e.path().filename().string());
  edit_config(plain, [](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "troupe"}, {"weight_type", "q4_0"}}; });
  expect(run_troupe("eval perplexity --model " + plain + " --text models/kjv/heldout.txt"), "has dtype F16; a q4_0 model stores its projections as U8");
}
