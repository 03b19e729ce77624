// A llama GGUF file and a safetensors folder of the same weights are the same model: written
// here from a synthesized folder the way llama.cpp's converter writes them (tensor names, reversed
// dimensions, each head's query/key rows interleaved), in F16 and in Q8_0/Q4_0 blocks, they
// give bit-identical logits. A file that does not fit the llama layout is an error naming the
// GGUF tensor or metadata key.
#define BOOST_TEST_MODULE gguf_model
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "runtime/common/error.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/config_json.h"
#include "runtime/model/gguf_import.h"
#include "runtime/model/gguf_mix.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/quantize.h"
#include "runtime/model/safetensors.h"
#include "tests/support/gguf_llama_writer.h"
#include "tests/support/models.h"
#include "runtime/model/model_source.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-gguf-model-" + std::to_string(::getpid()));
struct cleanup {
  ~cleanup() { fs::remove_all(scratch); }
} cleanup_at_exit;

std::string write_gguf(const std::string& dir, const std::string& file, std::optional<kernels::quant_type> quant,
                       const std::function<void(test::gguf_writer&)>& edit = {}) {
  fs::create_directories(scratch);
  const std::string path = (scratch / file).string();
  test::write_llama_gguf(dir, path, quant, edit);
  return path;
}

// Logits of every position of a 12-token prompt.
std::vector<float> logits_of(const model::llama_model& m) {
  const auto& mc = m.config();
  const int T = 12, blocks = 2;
  kv::kv_cache cache({blocks, 16, kernels::dtype::f32, false}, mc.num_hidden_layers, m.kv_heads(), mc.head_dim);
  std::vector<std::int32_t> table{1, 0};
  model::forward_batch b;
  for (int t = 0; t < T; ++t) {
    b.tokens.push_back((t * 37 + 5) % mc.vocab_size);
    b.positions.push_back(t);
    b.tables.push_back(table.data());
    b.logit_rows.push_back(t);
  }
  model::forward_workspace ws;
  std::vector<float> out(std::size_t(T) * std::size_t(mc.vocab_size));
  m.forward(b, cache, out.data(), ws);
  return out;
}

void same_logits(const std::string& a, const std::string& b) {
  const auto ma = model::llama_model::load(a), mb = model::llama_model::load(b);
  const auto la = logits_of(*ma), lb = logits_of(*mb);
  BOOST_TEST_REQUIRE(la.size() == lb.size());
  BOOST_TEST(std::memcmp(la.data(), lb.data(), la.size() * 4) == 0, a << " vs " << b);
}

void expect_error(const std::string& path, const std::string& words) {
  try {
    model::llama_model::load(path);
    BOOST_FAIL("no error, wanted '" << words << "'");
  } catch (const input_error& e) {
    BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, "wanted '" << words << "' in: " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_f16_gguf_is_its_safetensors_folder) {
  const auto dir = test::synth_model("tiny-llama-f16", test::preset("tiny", "llama", kernels::dtype::f16));
  const auto file = write_gguf(dir, "f16.gguf", std::nullopt);
  const auto c = model::load_model_config(file), d = model::load_model_config(dir);
  BOOST_TEST(model::to_config_json(c) != "");
  BOOST_TEST(c.hidden_size == d.hidden_size);
  BOOST_TEST(c.num_key_value_heads == d.num_key_value_heads);
  BOOST_TEST(c.vocab_size == d.vocab_size);
  BOOST_TEST(c.tie_word_embeddings == d.tie_word_embeddings);
  same_logits(dir, file);
  BOOST_TEST(model::model_fingerprint(file) != model::model_fingerprint(dir));  // another file, another identity
}

BOOST_AUTO_TEST_CASE(q8_0_and_q4_0_ggufs_are_the_quantized_folders) {
  const auto dir = test::synth_model("tiny-llama-f16", test::preset("tiny", "llama", kernels::dtype::f16));
  for (auto q : {kernels::quant_type::q8_0, kernels::quant_type::q4_0}) {
    const std::string out = (scratch / kernels::quant_name(q)).string();
    fs::remove_all(out);
    model::quantize_model({dir, out, q});
    const auto file = write_gguf(out, std::string(kernels::quant_name(q)) + ".gguf", q);
    same_logits(out, file);
  }
}

BOOST_AUTO_TEST_CASE(llama_cpp_mixes_give_the_logits_of_their_dequantized_f32_files) {
  // A llama whose rows are all whole super-blocks (hidden 256, intermediate 512, 4 layers), in
  // each of llama.cpp's mixes: the embedding table, the head and every projection in the mix's
  // type, with q4_k_m's and q5_k_m's Q6_K attn_v beside Q4_K/Q5_K attn_q in layers 2 and 3.
  const auto dir = test::synth_model("moe-sized-llama-f32", test::preset("moe", "llama"));
  fs::create_directories(scratch);
  // Relative RMS of the logits' difference: what quantizing the activations costs (1.8% for
  // q8_0's blocks of 32 here, 2.4-2.8% for the K-quants' 256), with margin; a wrong block layout
  // or scale costs the whole signal. q4_0 is here for its Q6_K head, which llama.cpp's own
  // Q4_0 files have.
  for (const std::string mix : {"q8_0", "q4_0", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "iq4_xs"}) {
    const std::string file = (scratch / (mix + ".gguf")).string(), f32 = (scratch / (mix + "-f32.gguf")).string();
    test::write_mixed_llama_gguf(dir, file, mix, f32);
    {
      const model::gguf_file g(file);
      BOOST_TEST(std::uint32_t(g.tensors().at("output.weight").type) == (mix == "q8_0" ? 8u : 14u), mix);  // Q8_0 or Q6_K
      BOOST_TEST(std::uint32_t(g.tensors().at("blk.2.attn_v.weight").type) ==
                     model::gguf_mix_type(mix, "blk.2.attn_v.weight", 4, 256), mix);
    }
    const auto quantized = model::llama_model::load(file), reference = model::llama_model::load(f32);
    const auto lq = logits_of(*quantized), lf = logits_of(*reference);
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < lq.size(); ++i) diff += (lq[i] - lf[i]) * (lq[i] - lf[i]), norm += double(lf[i]) * lf[i];
    const double rel = std::sqrt(diff / norm);
    BOOST_TEST_MESSAGE(mix << ": logits' relative RMS difference from the dequantized file " << rel);
    BOOST_TEST(rel < 0.05, mix << ": " << rel);
    // The same file loaded again gives the same bits, so the same greedy tokens.
    const auto again = logits_of(*model::llama_model::load(file));
    BOOST_TEST(std::memcmp(again.data(), lq.data(), lq.size() * 4) == 0, mix);
  }
}

BOOST_AUTO_TEST_CASE(rows_that_are_not_whole_super_blocks_fall_back_to_32_weight_blocks) {
  // The small preset's MLP has 1408 features: ffn_down's rows (1408 long) cannot be Q4_K, and
  // the mix writes them as Q4_0 (Q8_0 under q6_k) as llama.cpp falls back to a 32-block type.
  const auto dir = test::synth_model("small-llama-f32", test::preset("small"));
  fs::create_directories(scratch);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.1.ffn_down.weight", 8, 1408) == 2u);
  BOOST_TEST(model::gguf_mix_type("q6_k", "blk.1.ffn_down.weight", 8, 1408) == 8u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.1.ffn_gate.weight", 8, 512) == 12u);
  const std::string file = (scratch / "small-q4_k_m.gguf").string(), f32 = (scratch / "small-f32.gguf").string();
  test::write_mixed_llama_gguf(dir, file, "q4_k_m", f32);
  const auto lq = logits_of(*model::llama_model::load(file)), lf = logits_of(*model::llama_model::load(f32));
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < lq.size(); ++i) diff += (lq[i] - lf[i]) * (lq[i] - lf[i]), norm += double(lf[i]) * lf[i];
  BOOST_TEST(std::sqrt(diff / norm) < 0.05);
  BOOST_CHECK_THROW(model::gguf_mix_type("q4_k_s", "output.weight", 8, 512), input_error);
}

// A mixture of experts in a mix: the router stays F32 (llama.cpp never quantizes ffn_gate_inp);
// stacked and shared experts take the rule of the projection they are (ffn_down_exps is an
// ffn_down, so the layers with more bits get Q6_K there too).
BOOST_AUTO_TEST_CASE(a_mix_keeps_the_router_f32_and_treats_experts_as_their_projections) {
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.1.ffn_gate_inp.weight", 8, 256) == 0u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.1.ffn_gate_inp_shexp.weight", 8, 256) == 0u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.0.ffn_down_exps.weight", 8, 512) == 14u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.0.ffn_down_shexp.weight", 8, 512) == 14u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.2.ffn_down_exps.weight", 8, 512) == 12u);
  BOOST_TEST(model::gguf_mix_type("q4_k_m", "blk.3.ffn_gate_exps.weight", 8, 512) == 12u);
}

BOOST_AUTO_TEST_CASE(files_that_do_not_fit_are_errors_naming_the_tensor_or_key) {
  const auto dir = test::synth_model("tiny-llama-f16", test::preset("tiny", "llama", kernels::dtype::f16));
  // A config that disagrees with the tensors: the first tensor it shapes wrongly is named.
  expect_error(write_gguf(dir, "shape.gguf", std::nullopt, [](test::gguf_writer& w) { w.u32("llama.feed_forward_length", 96); }),
               "GGUF tensor 'blk.0.ffn_gate.weight'");
  expect_error(write_gguf(dir, "arch.gguf", std::nullopt, [](test::gguf_writer& w) { w.str("general.architecture", "gpt2"); }),
               "general.architecture is 'gpt2'");
  expect_error(write_gguf(dir, "rope.gguf", std::nullopt, [](test::gguf_writer& w) { w.str("llama.rope.scaling.type", "dynamic"); }),
               "llama.rope.scaling.type");
  // A llama file interleaves whole heads for RoPE: a part of each rotated is refused, by key.
  expect_error(write_gguf(dir, "rotary.gguf", std::nullopt, [](test::gguf_writer& w) { w.u32("llama.rope.dimension_count", 8); }),
               "llama.rope.dimension_count");
  expect_error((scratch / "missing.gguf").string(), "cannot open");
  // A NaN or negative rope base loaded silently and turned every rotation into NaN.
  expect_error(write_gguf(dir, "nan.gguf", std::nullopt, [](test::gguf_writer& w) { w.f32("llama.rope.freq_base", std::nanf("")); }),
               "metadata 'llama.rope.freq_base' must be a finite number");
  expect_error(write_gguf(dir, "neg.gguf", std::nullopt, [](test::gguf_writer& w) { w.f32("llama.rope.freq_base", -1.0f); }),
               "'rope_theta' must be a positive number");
  expect_error(write_gguf(dir, "eps.gguf", std::nullopt,
                          [](test::gguf_writer& w) { w.f32("llama.attention.layer_norm_rms_epsilon", INFINITY); }),
               "layer_norm_rms_epsilon' must be a finite number");
  // More layers in the metadata than in the file: the error spoke of safetensors files.
  expect_error(write_gguf(dir, "blocks.gguf", std::nullopt, [](test::gguf_writer& w) { w.u32("llama.block_count", 40); }),
               "is missing from the GGUF file");
}
