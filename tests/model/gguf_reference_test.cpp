// Troupe's GGUF files and reader against an independent reader, Hugging Face's @huggingface/gguf
// (tests/model/gguf-reference, installed from the npm registry by scripts/install-deps.sh): for
// the committed model written as a GGUF (F16, its tokenizer and chat template) and for Q8_0 and
// Q4_0 files, both readers find the same metadata values and the same tensor table (names,
// dimensions, ggml types, data offsets). This checks the test writer and the reader at once.
#define BOOST_TEST_MODULE gguf_reference
#include <boost/test/unit_test.hpp>

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
