// A llama GGUF file and a safetensors folder of the same weights are the same model: written
// here from a synthesized folder the way llama.cpp's converter writes them (tensor names, reversed
// dimensions, each head's query/key rows interleaved), in F16 and in Q8_0/Q4_0 blocks, they
// give bit-identical logits. A file that does not fit the llama layout is an error naming the
// GGUF tensor or metadata key.
#define BOOST_TEST_MODULE gguf_model
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "runtime/common/error.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/gguf_llama.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/quantize.h"
#include "runtime/model/safetensors.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/models.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path scratch = fs::temp_directory_path() / ("troupe-gguf-model-" + std::to_string(::getpid()));
struct cleanup {
  ~cleanup() { fs::remove_all(scratch); }
} cleanup_at_exit;

// Hugging Face name -> GGUF name, as convert_hf_to_gguf.py maps a llama model.
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> parts[] = {
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},   {"self_attn.v_proj", "attn_v"},           {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},                {"mlp.down_proj", "ffn_down"}};
  const std::string layer = hf.substr(std::strlen("model.layers."), hf.find('.', std::strlen("model.layers.")) - std::strlen("model.layers."));
  for (auto& [h, g] : parts)
    if (hf.find(std::string(".") + h + ".weight") != std::string::npos) return "blk." + layer + "." + g + ".weight";
  BOOST_FAIL("no GGUF name for " << hf);
  return {};
}

// The converter's row order for a query/key weight: row h*d + 2j + s holds HF row h*d + s*d/2 + j.
std::string interleave_heads(const std::uint8_t* data, std::size_t bytes, int heads, int d) {
  const std::size_t row = bytes / std::size_t(heads * d);
  std::string out(bytes, '\0');
  for (int h = 0; h < heads; ++h)
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < d / 2; ++j)
        std::memcpy(out.data() + std::size_t(h * d + 2 * j + s) * row, data + std::size_t(h * d + s * d / 2 + j) * row, row);
  return out;
}

// A GGUF file holding the tensors of the safetensors folder `dir` (F32/F16 as they are, U8
// rows of a troupe-quantized folder as `quant`'s ggml type).
std::string write_gguf(const std::string& dir, const std::string& file, std::optional<kernels::quant_type> quant,
                       const std::function<void(test::gguf_writer&)>& edit = {}) {
  const auto c = model::load_model_config(dir);
  test::gguf_writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", std::uint32_t(c.hidden_size));
  w.u32("llama.feed_forward_length", std::uint32_t(c.intermediate_size));
  w.u32("llama.block_count", std::uint32_t(c.num_hidden_layers));
  w.u32("llama.attention.head_count", std::uint32_t(c.num_attention_heads));
  w.u32("llama.attention.head_count_kv", std::uint32_t(c.num_key_value_heads));
  w.u32("llama.context_length", std::uint32_t(c.max_position_embeddings));
  w.u32("llama.rope.dimension_count", std::uint32_t(c.head_dim));
  w.f32("llama.attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.f32("llama.rope.freq_base", float(c.rope_theta));
  if (edit) edit(w);
  model::safetensors_file f(dir + "/model.safetensors");
  for (const auto& [name, t] : f.tensors()) {
    std::uint32_t type = t.dtype_name == "F32" ? 0 : t.dtype_name == "F16" ? 1 : t.dtype_name == "BF16" ? 30 : 99;
    std::vector<std::uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (t.dtype_name == "U8") {
      BOOST_TEST_REQUIRE(quant.has_value());
      type = *quant == kernels::quant_type::q8_0 ? 8 : 2;
      ne[0] = std::uint64_t(t.shape[1]) / (*quant == kernels::quant_type::q8_0 ? 34 : 18) * 32;
    }
    BOOST_TEST_REQUIRE(type != 99u, name << " " << t.dtype_name);
    std::string data(reinterpret_cast<const char*>(t.data), t.bytes);
    if (name.find("q_proj") != std::string::npos) data = interleave_heads(t.data, t.bytes, c.num_attention_heads, c.head_dim);
    if (name.find("k_proj") != std::string::npos) data = interleave_heads(t.data, t.bytes, c.num_key_value_heads, c.head_dim);
    w.tensor(gguf_name(name), type, ne, data);
  }
  fs::create_directories(scratch);
  const std::string path = (scratch / file).string();
  w.write(path);
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

BOOST_AUTO_TEST_CASE(files_that_do_not_fit_are_errors_naming_the_tensor_or_key) {
  const auto dir = test::synth_model("tiny-llama-f16", test::preset("tiny", "llama", kernels::dtype::f16));
  // A config that disagrees with the tensors: the first tensor it shapes wrongly is named.
  expect_error(write_gguf(dir, "shape.gguf", std::nullopt, [](test::gguf_writer& w) { w.u32("llama.feed_forward_length", 96); }),
               "GGUF tensor 'blk.0.ffn_gate.weight'");
  expect_error(write_gguf(dir, "arch.gguf", std::nullopt, [](test::gguf_writer& w) { w.str("general.architecture", "gpt2"); }),
               "general.architecture is 'gpt2'");
  expect_error(write_gguf(dir, "rope.gguf", std::nullopt, [](test::gguf_writer& w) { w.str("llama.rope.scaling.type", "yarn"); }),
               "llama.rope.scaling.type");
  expect_error((scratch / "missing.gguf").string(), "cannot open");
}
