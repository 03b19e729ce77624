// SmolLM3 (SmolLM3ForCausalLM): Llama's layers, but every fourth layer applies no RoPE
// (no_rope_layers: 1 where a layer rotates, 0 where it does not; Hugging Face derives it from
// no_rope_layer_interval, 4). llama.cpp converts it as llama (query/key rows interleaved) and
// fixes the interval at 4.
#include "runtime/common/error.h"
#include "runtime/model/family.h"

namespace troupe::model {

namespace {

std::vector<int> every_fourth_unrotated(int layers, int interval) {
  std::vector<int> rope(std::size_t(layers), 1);
  for (int l = 0; l < layers; ++l)
    if ((l + 1) % interval == 0) rope[std::size_t(l)] = 0;
  return rope;
}

}  // namespace

const family& smollm3_family() {
  static const family f{
      .name = "smollm3",
      .hf_architectures = {"SmolLM3ForCausalLM"},
      .gguf_architecture = "smollm3",
      .layer_tensors = decoder_layer_tensors(),
      .gguf_interleaves_rope = true,
      .read_hf = [](const hf_keys& k, model_config& c) {
        c.attention_bias = k.bool_or("attention_bias", false);
        c.tie_word_embeddings = k.bool_or("tie_word_embeddings", true);
        c.layer_rope = k.ints_or("no_rope_layers", every_fourth_unrotated(c.num_hidden_layers, k.int_or("no_rope_layer_interval", 4)));
        for (int r : c.layer_rope)
          if (r != 0 && r != 1) throw input_error(k.source() + ": 'no_rope_layers' holds " + std::to_string(r) + "; 1 or 0 per layer");
      },
      .read_gguf = [](const gguf_keys&, model_config& c) { c.layer_rope = every_fourth_unrotated(c.num_hidden_layers, 4); },
      .write_hf = [](const model_config& c, nlohmann::json& j) {
        j["attention_bias"] = c.attention_bias;
        j["no_rope_layers"] = c.layer_rope;
      },
      .write_gguf = {},
      .synth = [](model_config& c) {
        c.tie_word_embeddings = true;
        c.layer_rope = every_fourth_unrotated(c.num_hidden_layers, 4);
      },
  };
  return f;
}

}  // namespace troupe::model
