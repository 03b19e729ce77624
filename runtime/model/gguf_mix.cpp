#include "runtime/model/gguf_mix.h"

#include <algorithm>
#include <cstring>
#include <regex>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant.h"
#include "runtime/common/error.h"

namespace troupe::model {

namespace {

// ggml type numbers.
constexpr std::uint32_t f32 = 0, q4_0 = 2, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, iq4_xs = 23;

// llama.cpp's layers that get more bits: the first and last eighth, and every third between.
bool more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

std::uint32_t base_of(const std::string& mix) {
  if (mix == "q2_k") return q2_k;
  if (mix == "q3_k_m") return q3_k;
  if (mix == "q4_k_m") return q4_k;
  if (mix == "q5_k_m") return q5_k;
  if (mix == "q6_k") return q6_k;
  if (mix == "iq4_xs") return iq4_xs;
  if (mix == "q4_0") return q4_0;
  if (mix == "q8_0") return q8_0;
  std::string known;
  for (auto& m : gguf_mixes()) known += (known.empty() ? "" : ", ") + m;
  throw input_error("unknown quantization mix '" + mix + "' (" + known + ")");
}

// A super-block type where rows are not whole super-blocks: the 32-weight block type nearest in size.
std::uint32_t fitted(std::uint32_t type, std::int64_t row_length) {
  if (type == q4_0 || type == q8_0 || type == f32 || row_length % 256 == 0) return type;
  return type == q5_k || type == q6_k ? q8_0 : q4_0;
}

}  // namespace

const std::vector<std::string>& gguf_mixes() {
  static const std::vector<std::string> all = {"q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k", "iq4_xs", "q4_0", "q8_0"};
  return all;
}

std::uint32_t gguf_mix_type(const std::string& mix, const std::string& name, int layers, std::int64_t row_length) {
  const std::uint32_t base = base_of(mix);
  if (name.find("_norm.") != std::string::npos) return f32;
  if (name == "output.weight") return fitted(base == q8_0 ? q8_0 : q6_k, row_length);
  static const std::regex block(R"(blk\.(\d+)\.(\w+)\.weight)");
  std::smatch m;
  if (!std::regex_match(name, m, block)) return fitted(base, row_length);
  const int layer = std::stoi(m[1].str());
  std::string part = m[2].str();
  // A mixture of experts' router stays F32, as llama.cpp keeps it; its stacked experts and shared
  // expert take the mix's choice for the projection they are (ffn_down_exps is an ffn_down).
  if (part.rfind("ffn_gate_inp", 0) == 0) return f32;
  for (const char* proj : {"ffn_down", "ffn_gate", "ffn_up"})
    if (part.rfind(proj, 0) == 0) part = proj;
  std::uint32_t type = base;
  if (mix == "q4_k_m" || mix == "q5_k_m") {
    if ((part == "attn_v" || part == "ffn_down") && more_bits(layer, layers)) type = q6_k;
  } else if (mix == "q3_k_m") {
    if (part == "attn_v") type = layer < 2 ? q5_k : q4_k;
    if (part == "attn_output") type = q4_k;
    if (part == "ffn_down") type = layer < std::max(1, layers / 16) ? q5_k : q4_k;
  } else if (mix == "q2_k") {
    if (part == "attn_v") type = q4_k;
    if (part == "attn_output" || part == "ffn_down") type = q3_k;
  }
  return fitted(type, row_length);
}

std::optional<std::string> gguf_tensor_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+)\.weight)");
  static const std::pair<const char*, const char*> parts[] = {
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},   {"self_attn.v_proj", "attn_v"},           {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},                {"mlp.down_proj", "ffn_down"},
      {"self_attn.qkv_proj", "attn_qkv"}, {"mlp.gate_up_proj", "ffn_up"}};  // Phi-3's fused projections, as llama.cpp names them
  std::smatch m;
  if (!std::regex_match(hf, m, layer)) return std::nullopt;
  for (auto& [h, g] : parts)
    if (m[2].str() == h) return "blk." + m[1].str() + "." + g + ".weight";
  return std::nullopt;
}

std::size_t ggml_row_bytes(std::uint32_t type, std::size_t len) {
  if (auto k = kernels::kquant_of_ggml(type)) return len / kernels::kquant_block * kernels::kquant_block_bytes(*k);
  if (type == q4_0) return kernels::quant_row_bytes(kernels::quant_type::q4_0, len);
  if (type == q8_0) return kernels::quant_row_bytes(kernels::quant_type::q8_0, len);
  if (type == 1) return len * 2;  // F16
  return len * 4;  // F32
}

void quantize_ggml_row(std::uint32_t type, const float* in, std::size_t len, std::uint8_t* out) {
  if (auto k = kernels::kquant_of_ggml(type)) kernels::quantize_kquant_row(*k, in, len, out);
  else if (type == q4_0) kernels::quantize_row(kernels::quant_type::q4_0, in, len, out, nullptr);
  else if (type == q8_0) kernels::quantize_row(kernels::quant_type::q8_0, in, len, out, nullptr);
  else if (type == 1)
    for (std::size_t i = 0; i < len; ++i) kernels::store_from_f32(out, kernels::dtype::f16, i, in[i]);
  else std::memcpy(out, in, len * 4);
}

std::string ggml_format_name(std::uint32_t type) {
  if (auto k = kernels::kquant_of_ggml(type)) return kernels::kquant_name(*k);
  if (type == q4_0) return "q4_0";
  if (type == q8_0) return "q8_0";
  return "f32";
}

}  // namespace troupe::model
