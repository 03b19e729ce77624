// RoPE and its scalings, as config.json states them and as the forward applies them: the
// inverse frequency of each rotary pair (head_dim / 2 of them) and what every rotation is scaled
// by. The scalings the families use: linear (positions divided by a factor), llama3 (long
// wavelengths slowed, short ones kept, a blend between), longrope (Phi-3: a divisor per
// frequency, the long ones when the model's context passes the original, an attention factor),
// and YaRN (Qwen2.5's long contexts, DeepSeek: interpolated low frequencies, extrapolated high
// ones, a linear ramp between by rotations over the original context, and an attention factor
// 0.1 ln(factor) + 1). `dynamic` NTK is refused by name: it changes the rotation of positions
// already in the cache as a sequence grows.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/model_config.h"

namespace troupe::model {

// config.json's rope_scaling into c.rope_scaling (nothing for null or type "default"); throws
// input_error naming the key for an unknown type or a wrong value.
void read_rope_scaling(const nlohmann::json& config, const std::string& source, model_config& c);
// What rope_scaling needs to hold for the forward: factors of the right count, positive.
void check_rope_scaling(const std::string& source, const model_config& c);
// The inverse frequencies c's forward rotates by, in double (model_config::rope_inv_freq).
std::vector<double> rope_frequencies(const model_config& c, bool local);
// config.json's rope_scaling object for s (what the synthesizer writes).
nlohmann::json rope_scaling_json(const rope_scaling_config& s);

}  // namespace troupe::model
