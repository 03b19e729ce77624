// The GGUF reader against files written here: metadata of every kind and tensors of every
// readable type come back as written (dimensions reversed into row-major order), and every
// malformed file is an error naming what is wrong, never a crash: each prefix of a valid file,
// a bad magic or version, an unknown tensor or metadata type, rows that are not whole blocks,
// misaligned or out-of-file tensor data.
#define BOOST_TEST_MODULE gguf
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/quant.h"
#include "runtime/common/error.h"
#include "runtime/model/gguf.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/random.h"

using namespace troupe;
using test::gguf_writer;
namespace fs = std::filesystem;

namespace {

struct scratch_file {
  std::string path = (fs::temp_directory_path() / ("troupe-gguf-test-" + std::to_string(::getpid()) + ".gguf")).string();
  ~scratch_file() { fs::remove(path); }
};

std::string quantized(kernels::quant_type t, std::size_t rows, std::size_t k, std::uint64_t seed) {
  auto w = test::random_floats(rows * k, seed);
  std::string out(rows * kernels::quant_row_bytes(t, k), '\0');
  float scale;
  for (std::size_t r = 0; r < rows; ++r)
    kernels::quantize_row(t, w.data() + r * k, k, reinterpret_cast<std::uint8_t*>(out.data()) + r * kernels::quant_row_bytes(t, k), &scale);
  return out;
}

gguf_writer sample() {
  gguf_writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 2);
  w.f32("llama.rope.freq_base", 10000.0f);
  w.boolean("tokenizer.ggml.add_bos_token", true);
  w.u64("big", std::uint64_t(1) << 40);
  w.i32("neg", -7);
  w.strings("tokenizer.ggml.tokens", {"<s>", "</s>", "hello", ""});
  w.f32s("tokenizer.ggml.scores", {0.0f, -1.5f, 2.25f, 0.0f});
  w.i32s("tokenizer.ggml.token_type", {3, 3, 1, 1});
  std::string f32(3 * 4 * 4, '\0');
  for (int i = 0; i < 12; ++i) {
    const float v = float(i) * 0.5f;
    std::memcpy(f32.data() + 4 * i, &v, 4);
  }
  w.tensor("a.f32", 0, {4, 3}, f32);
  std::string f16(2 * 32 * 2, '\0');
  for (int i = 0; i < 64; ++i) {
    const std::uint16_t h = kernels::f32_to_f16(float(i));
    std::memcpy(f16.data() + 2 * i, &h, 2);
  }
  w.tensor("b.f16", 1, {32, 2}, f16);
  w.tensor("c.q8_0", 8, {64, 5}, quantized(kernels::quant_type::q8_0, 5, 64, 1));
  w.tensor("d.q4_0", 2, {96, 3}, quantized(kernels::quant_type::q4_0, 3, 96, 2));
  return w;
}

void expect_error(const std::string& bytes, const std::string& words) {
  scratch_file f;
  std::ofstream(f.path, std::ios::binary) << bytes;
  try {
    model::gguf_file g(f.path);
    BOOST_FAIL("no error, wanted '" << words << "'");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, "wanted '" << words << "' in: " << e.what());
    BOOST_TEST(std::string(e.what()).find(f.path) != std::string::npos);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(metadata_and_tensors_come_back_as_written) {
  scratch_file f;
  const gguf_writer w = sample();
  w.write(f.path);
  model::gguf_file g(f.path);
  BOOST_TEST(g.version() == 3u);
  const auto& m = g.metadata();
  BOOST_TEST(m["general.architecture"].get<std::string>() == "llama");
  BOOST_TEST(m["llama.block_count"].get<std::uint32_t>() == 2u);
  BOOST_TEST(m["llama.rope.freq_base"].get<float>() == 10000.0f);
  BOOST_TEST(m["tokenizer.ggml.add_bos_token"].get<bool>() == true);
  BOOST_TEST(m["big"].get<std::uint64_t>() == std::uint64_t(1) << 40);
  BOOST_TEST(m["neg"].get<std::int32_t>() == -7);
  BOOST_TEST(m["tokenizer.ggml.tokens"].size() == 4u);
  BOOST_TEST(m["tokenizer.ggml.tokens"][2].get<std::string>() == "hello");
  BOOST_TEST(m["tokenizer.ggml.tokens"][3].get<std::string>() == "");
  BOOST_TEST(m["tokenizer.ggml.scores"][2].get<float>() == 2.25f);
  BOOST_TEST(m["tokenizer.ggml.token_type"][0].get<int>() == 3);

  const auto& t = g.tensors();
  BOOST_TEST_REQUIRE(t.size() == 4u);
  const auto& a = t.at("a.f32");
  BOOST_TEST((a.shape == std::vector<std::int64_t>{3, 4}));  // ne = {4, 3}: 3 rows of 4
  BOOST_TEST(a.bytes == 48u);
  float v;
  std::memcpy(&v, a.data + 4 * 7, 4);
  BOOST_TEST(v == 3.5f);
  const auto& b = t.at("b.f16");
  BOOST_TEST((b.shape == std::vector<std::int64_t>{2, 32}));
  std::uint16_t h;
  std::memcpy(&h, b.data + 2 * 40, 2);
  BOOST_TEST(kernels::f16_to_f32(h) == 40.0f);
  const auto& c = t.at("c.q8_0");
  BOOST_TEST((c.shape == std::vector<std::int64_t>{5, 64}));
  BOOST_TEST(c.bytes == 5u * 68u);
  BOOST_TEST(std::memcmp(c.data, quantized(kernels::quant_type::q8_0, 5, 64, 1).data(), c.bytes) == 0);
  const auto& d = t.at("d.q4_0");
  BOOST_TEST((d.type == model::ggml_type::q4_0));
  BOOST_TEST(std::memcmp(d.data, quantized(kernels::quant_type::q4_0, 3, 96, 2).data(), d.bytes) == 0);
  // Every tensor starts on the alignment.
  for (auto& [name, x] : t) BOOST_TEST((x.data - t.at("a.f32").data) % 32 == 0, name);
}

BOOST_AUTO_TEST_CASE(a_larger_alignment_is_honoured) {
  scratch_file f;
  gguf_writer w = sample();
  w.alignment = 64;
  w.write(f.path);
  model::gguf_file g(f.path);
  BOOST_TEST(std::memcmp(g.tensors().at("d.q4_0").data, quantized(kernels::quant_type::q4_0, 3, 96, 2).data(), 3 * 54) == 0);
}

BOOST_AUTO_TEST_CASE(every_prefix_of_a_valid_file_is_a_clear_error) {
  const std::string full = sample().bytes();
  // The last tensor's trailing bytes are data: cutting there must fail too.
  std::vector<std::size_t> cuts;
  for (std::size_t n = 0; n < full.size(); n += (n < 600 ? 1 : 7)) cuts.push_back(n);
  cuts.push_back(full.size() - 1);  // one byte short of the last tensor's data
  for (std::size_t n : cuts) {
    scratch_file f;
    std::ofstream(f.path, std::ios::binary) << full.substr(0, n);
    try {
      model::gguf_file g(f.path);
      BOOST_FAIL("a file cut at " << n << " of " << full.size() << " bytes was read");
    } catch (const input_error& e) {
      const std::string what = e.what();
      BOOST_TEST_REQUIRE((what.find("truncated") != std::string::npos || what.find("bad magic") != std::string::npos),
                         "cut at " << n << ": " << what);
    }
  }
}

BOOST_AUTO_TEST_CASE(malformed_files_are_errors_naming_what_is_wrong) {
  std::string bad = sample().bytes();
  bad[0] = 'X';
  expect_error(bad, "bad magic");
  gguf_writer v1 = sample();
  v1.version = 1;
  expect_error(v1.bytes(), "GGUF version 1");
  gguf_writer q5 = sample();  // Q5_0: a type Troupe does not read
  q5.tensor("blk.0.ffn_down.weight", 6, {256, 2}, std::string(2 * 8 * 22, '\0'));
  expect_error(q5.bytes(), "tensor 'blk.0.ffn_down.weight' has type Q5_0; supported:");
  gguf_writer k_rows = sample();
  k_rows.tensor("blk.0.ffn_down.weight", 14, {128, 2}, std::string(210, '\0'));
  expect_error(k_rows.bytes(), "has rows of 128 elements, not whole Q6_K blocks of 256");
  gguf_writer rows = sample();
  rows.tensor("odd", 8, {48, 2}, std::string(100, '\0'));
  expect_error(rows.bytes(), "tensor 'odd' has rows of 48 elements, not whole Q8_0 blocks of 32");
  gguf_writer meta = sample();
  meta.raw("weird", 13, "");
  expect_error(meta.bytes(), "metadata 'weird' has unknown value type 13");
  gguf_writer dup = sample();
  dup.tensor("a.f32", 0, {4, 3}, std::string(48, '\0'));
  expect_error(dup.bytes(), "tensor 'a.f32' appears twice");
  // Two tensors over the same bytes: b.f16's offset set to a.f32's (0) in the table.
  std::string overlap = sample().bytes();
  const std::size_t at = overlap.find("b.f16") + 5 + 4 + 2 * 8 + 4;
  std::memset(overlap.data() + at, 0, 8);
  expect_error(overlap, "tensors 'a.f32' and 'b.f16' overlap");
  // A string length that runs past the end of the file.
  gguf_writer huge;
  huge.raw("s", 8, gguf_writer::pod(std::uint64_t(1) << 60));
  expect_error(huge.bytes(), "truncated: a string value");
  // An array claiming more elements than the file holds.
  gguf_writer arr;
  arr.raw("a", 9, gguf_writer::pod(std::uint32_t(4)) + gguf_writer::pod(std::uint64_t(1) << 50));
  expect_error(arr.bytes(), "truncated: an array's elements");
}
