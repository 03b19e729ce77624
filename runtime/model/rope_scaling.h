// RoPE and its scalings, as config.json states them and as the forward applies them: the
// inverse frequency of each rotary pair (head_dim / 2 of them) and what every rotation is scaled
// by. The scalings the families use: linear (positions divided by a factor), llama3 (long
// wavelengths slowed, short ones kept, a blend between), longrope (Phi-3: a divisor per
// frequency, the long ones when the model's context passes the original, an attention factor),
// and YaRN (Qwen2.5's long contexts, DeepSeek: interpolated low frequencies, extrapolated high
// ones, a linear ramp between by rotations over the original context, and an attention factor
// 0.1 ln(factor) + 1), and dynamic NTK. transformers' dynamic NTK stretches the base as the
// sequence grows past max_position_embeddings, which rotates the positions already cached anew
// (a prefix cache, a preempted request or a handoff would then answer otherwise than a fresh
// run); Troupe, as vLLM does, rotates every position by the base it reaches at
// max_position_embeddings x factor: base x (factor^2 - factor + 1)^(d / (d - 2)) for d rotated
// dimensions, so an answer never depends on how its sequence was cut up.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_config.h"

namespace troupe::model {

// config.json's rope_scaling into c.rope_scaling (nothing for null or type "default"), and its
// partial_rotary_factor into c.rotary_dim (c.head_dim read first); throws input_error naming the
// key for an unknown type or a wrong value.
void read_rope_scaling(const nlohmann::json& config, const std::string& source, model_config& c);
// What rope_scaling needs to hold for the forward: factors of the right count, positive.
void check_rope_scaling(const std::string& source, const model_config& c);
// The RoPE base c's forward rotates by: rope_theta, stretched by dynamic NTK.
double rope_base(const model_config& c);
// The inverse frequencies c's forward rotates by, in double (model_config::rope_inv_freq).
std::vector<double> rope_frequencies(const model_config& c, bool local);
// config.json's rope_scaling object for s (what the synthesizer writes).
nlohmann::json rope_scaling_json(const rope_scaling_config& s);

}  // namespace troupe::model
