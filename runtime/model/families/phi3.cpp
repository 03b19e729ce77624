// Phi-3 and Phi-4 (Phi3ForCausalLM): Llama's layers with the query, key and value projections
// stored as one qkv_proj and the MLP's gate and up as one gate_up_proj (rows in that order), and
// Phi-3's longrope: a divisor per RoPE frequency (short_factor, or long_factor when the model's
// context passes original_max_position_embeddings) and every rotation scaled by an attention
// factor. Phi-3-mini-4k attends to a sliding window (sliding_window). llama.cpp runs it with NEOX
// RoPE (GGUF rows in Hugging Face's order) and keeps the fused tensors: attn_qkv, and ffn_up
// holding gate and up; the divisors are rope_factors_long/short.weight, the factor
// phi3.rope.scaling.attn_factor. Phi-4-mini rotates only the first three quarters of each head
// (partial_rotary_factor 0.75, rope.dimension_count: read with RoPE's other keys for every
// family) and ties its embeddings.
#include <cmath>

#include "runtime/common/error.h"
#include "runtime/model/family.h"

namespace troupe::model {

namespace {

// longrope from GGUF: the divisors' tensors, the factor and the original context from the keys.
void read_gguf_longrope(const gguf_keys& k, model_config& c) {
  auto long_factor = k.divisors("rope_factors_long.weight");
  if (!long_factor) return;
  auto short_factor = k.divisors("rope_factors_short.weight");
  if (!short_factor) throw input_error(k.path() + ": tensor 'rope_factors_short.weight' is missing (longrope's divisors)");
  rope_scaling_config s;
  s.type = "longrope";
  s.long_factor = std::move(*long_factor);
  s.short_factor = std::move(*short_factor);
  s.original_max_position_embeddings = k.need_int("rope.scaling.original_context_length");
  s.attention_factor = k.real_or("rope.scaling.attn_factor", 1.0);
  c.rope_scaling = s;
}

}  // namespace

const family& phi3_family() {
  static const family f{
      .name = "phi3",
      .hf_architectures = {"Phi3ForCausalLM"},
      .gguf_architecture = "phi3",
      .layer_tensors = {{"attn_norm", "input_layernorm"}, {"ffn_norm", "post_attention_layernorm"},
                        {"attn_qkv", "self_attn.qkv_proj"}, {"attn_output", "self_attn.o_proj"},
                        {"ffn_up", "mlp.gate_up_proj"},    {"ffn_down", "mlp.down_proj"}},
      .gguf_interleaves_rope = false,
      .read_hf = [](const hf_keys&, model_config& c) { c.fused_projections = true; },
      .read_gguf = [](const gguf_keys& k, model_config& c) {
        c.fused_projections = true;
        c.sliding_window = k.int_or("attention.sliding_window", 0, 0);
        read_gguf_longrope(k, c);
      },
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        if (c.rope_scaling) j["original_max_position_embeddings"] = c.rope_scaling->original_max_position_embeddings;
      },
      .write_gguf = [](const model_config& c) {
        nlohmann::json j = nlohmann::json::object();
        if (c.sliding_window > 0) j["attention.sliding_window"] = c.sliding_window;
        if (c.rope_scaling && c.rope_scaling->type == "longrope") {
          j["rope.scaling.attn_factor"] = c.rope_scaling->attention_factor;
          j["rope.scaling.original_context_length"] = c.rope_scaling->original_max_position_embeddings;
        }
        return j;
      },
      // longrope over an original context of 256 grown to 4096 (so the tests' sequences pass it
      // and the long divisors apply) and divisors that differ frequency by frequency. No window:
      // llama.cpp reads Phi-3's and sets it aside, so a windowed file could not be compared.
      .synth = [](model_config& c) {
        c.fused_projections = true;
        rope_scaling_config s;
        s.type = "longrope";
        s.original_max_position_embeddings = 256;
        for (int i = 0; i < c.rotated_dims() / 2; ++i) {
          s.short_factor.push_back(1.0 + 0.05 * i);
          s.long_factor.push_back(1.0 + 0.5 * i);
        }
        s.attention_factor = std::sqrt(1 + std::log(double(c.max_position_embeddings) / 256) / std::log(256.0));
        c.rope_scaling = s;
      },
  };
  return f;
}

}  // namespace troupe::model
