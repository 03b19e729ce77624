// Troupe's GGUF files and reader against an independent reader, Hugging Face's @huggingface/gguf
// (tests/model/gguf-reference, installed from the npm registry by scripts/install-deps.sh): for
// the committed model written as a GGUF (F16, its tokenizer and chat template) and for Q8_0 and
// Q4_0 files, both readers find the same metadata values and the same tensor table (names,
// dimensions, ggml types, data offsets). This checks the test writer and the reader at once.
#define BOOST_TEST_MODULE gguf_reference
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "runtime/model/gguf.h"
#include "runtime/model/quantize.h"
#include "tests/support/gguf_llama_writer.h"
#include "tests/support/models.h"
#include "tests/support/process.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-gguf-ref-" + std::to_string(::getpid()));
struct cleanup {
  ~cleanup() { fs::remove_all(scratch); }
} cleanup_at_exit;

nlohmann::json reference_read(const std::string& file) {
  const std::string dir = std::string(TROUPE_SOURCE_DIR) + "/tests/model/gguf-reference";
  BOOST_TEST_REQUIRE(fs::exists(dir + "/node_modules/@huggingface/gguf"), "run scripts/install-deps.sh first");
  const auto r = test::run_command("cd " + dir + " && node read.mjs " + file + " 2>&1");
  BOOST_TEST_REQUIRE(r.status == 0, r.output);
  return nlohmann::json::parse(r.output);
}

void same_as_reference(const std::string& file) {
  const model::gguf_file g(file);
  const auto ref = reference_read(file);
  // Metadata: every key troupe read, with the same value (floats compared as read: f32 both).
  for (auto& [key, value] : g.metadata().items()) {
    BOOST_TEST_REQUIRE(ref["metadata"].contains(key), key);
    const auto& theirs = ref["metadata"][key];
    if (value.is_number_float())
      BOOST_TEST(value.get<double>() == theirs.get<double>(), key);
    else
      BOOST_TEST(value == theirs, key << ": " << value.dump().substr(0, 200) << " vs " << theirs.dump().substr(0, 200));
  }
  // Tensors: the same table.
  BOOST_TEST_REQUIRE(ref["tensors"].size() == g.tensors().size());
  for (const auto& t : ref["tensors"]) {
    const auto name = t["name"].get<std::string>();
    BOOST_TEST_REQUIRE(g.tensors().count(name), name);
    const auto& mine = g.tensors().at(name);
    std::vector<std::int64_t> ne(mine.shape.rbegin(), mine.shape.rend());
    BOOST_TEST((t["ne"].get<std::vector<std::int64_t>>() == ne), name);
    BOOST_TEST(t["type"].get<std::uint32_t>() == std::uint32_t(mine.type), name);
    BOOST_TEST(t["offset"].get<std::size_t>() == mine.file_offset, name);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_committed_model_as_gguf_reads_the_same_in_both) {
  fs::create_directories(scratch);
  const std::string file = (scratch / "kjv.gguf").string();
  test::write_llama_gguf(std::string(TROUPE_SOURCE_DIR) + "/models/kjv", file, std::nullopt);
  same_as_reference(file);
}

BOOST_AUTO_TEST_CASE(quantized_files_read_the_same_in_both) {
  fs::create_directories(scratch);
  const auto dir = test::synth_model("tiny-llama-f16", test::preset("tiny", "llama", kernels::dtype::f16));
  for (auto q : {kernels::quant_type::q8_0, kernels::quant_type::q4_0}) {
    const std::string out = (scratch / kernels::quant_name(q)).string();
    model::quantize_model({dir, out, q});
    const std::string file = out + ".gguf";
    test::write_llama_gguf(out, file, q);
    same_as_reference(file);
  }
}

BOOST_AUTO_TEST_CASE(k_quant_mixes_read_the_same_in_both) {
  // Every K-quant and IQ4_XS type, each tensor its own as the mixes assign them.
  fs::create_directories(scratch);
  const auto dir = test::synth_model("moe-sized-llama-f32", test::preset("moe", "llama"));
  for (const std::string mix : {"q2_k", "q3_k_m", "q4_k_m", "iq4_xs"}) {
    const std::string file = (scratch / (mix + ".gguf")).string();
    test::write_mixed_llama_gguf(dir, file, mix, (scratch / (mix + "-f32.gguf")).string());
    same_as_reference(file);
  }
}

BOOST_AUTO_TEST_CASE(troupe_model_quantize_writes_the_file_its_mix_describes) {
  // The user's command against the tests' own writer: the same tensors (names, dimensions,
  // types and every byte of their data), the same metadata where both write a key, the file
  // type llama.cpp records for the mix, and the same reading in @huggingface/gguf.
  fs::create_directories(scratch);
  const std::string kjv = std::string(TROUPE_SOURCE_DIR) + "/models/kjv";
  const std::pair<std::string, std::uint32_t> mixes[] = {{"q4_k_m", 15u}, {"iq4_xs", 30u}, {"q3_k_m", 12u}};
  for (const auto& [mix, file_type] : mixes) {
    const std::string file = (scratch / ("cli-" + mix + ".gguf")).string(), ref = (scratch / ("ref-" + mix + ".gguf")).string();
    const auto r = test::run_command(std::string(TROUPE_BINARY_DIR) + "/troupe model quantize --type " + mix + " --model " + kjv +
                                     " --out " + file + " 2>&1");
    BOOST_TEST_REQUIRE(r.status == 0, r.output);
    test::write_mixed_llama_gguf(kjv, ref, mix, (scratch / ("ref-" + mix + "-f32.gguf")).string());
    const model::gguf_file a(file), b(ref);
    BOOST_TEST_REQUIRE(a.tensors().size() == b.tensors().size(), mix);
    for (const auto& [name, t] : b.tensors()) {
      BOOST_TEST_REQUIRE(a.tensors().count(name), mix << " " << name);
      const auto& u = a.tensors().at(name);
      BOOST_TEST((u.shape == t.shape && u.type == t.type && u.bytes == t.bytes), mix << " " << name);
      BOOST_TEST(std::memcmp(u.data, t.data, std::min(u.bytes, t.bytes)) == 0, mix << " " << name << "'s data");
    }
    for (const auto& [key, value] : b.metadata().items())
      BOOST_TEST(a.metadata().value(key, nlohmann::json()) == value, mix << " " << key);
    BOOST_TEST(a.metadata().at("general.file_type").get<std::uint32_t>() == file_type, mix);
    BOOST_TEST(a.metadata().at("general.quantization_version").get<std::uint32_t>() == 2u);
    same_as_reference(file);
  }
}
