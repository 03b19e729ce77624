#include "runtime/model/rope_scaling.h"

#include <algorithm>
#include <cmath>

#include "runtime/common/error.h"
#include "runtime/model/config_keys.h"

namespace troupe::model {

using nlohmann::json;

namespace {

// longrope's divisors and attention factor; the factor, when not given, from the context's
// growth over the original: sqrt(1 + ln(max / original) / ln(original)), 1 when it did not grow.
void read_longrope(const hf_keys& k, int max_positions, rope_scaling_config& s) {
  s.short_factor = k.reals("short_factor");
  s.long_factor = k.reals("long_factor");
  const double grown = double(max_positions) / s.original_max_position_embeddings;
  s.attention_factor =
      k.real_or("attention_factor", grown <= 1 ? 1.0 : std::sqrt(1 + std::log(grown) / std::log(double(s.original_max_position_embeddings))));
}

// YaRN's ramp and attention factor: 0.1 ln(factor) + 1 unless given (DeepSeek's mscale and
// mscale_all_dim, a ratio of two such terms, are issue-63 work and refused by name here).
void read_yarn(const hf_keys& k, rope_scaling_config& s) {
  if (k.has("mscale") || k.has("mscale_all_dim"))
    throw input_error(k.source() + ": 'mscale' is not supported (DeepSeek's YaRN attention scaling)");
  s.beta_fast = k.real_or("beta_fast", 32.0);
  s.beta_slow = k.real_or("beta_slow", 1.0);
  s.attention_factor = k.real_or("attention_factor", s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0);
  if (k.has("truncate") && !k.bool_or("truncate", true))
    throw input_error(k.source() + ": 'truncate' false is not supported (the ramp's ends are whole pairs)");
}

// YaRN's inverse frequencies: each pair's interpolated (divided by factor) and extrapolated
// (unchanged) values blended by a ramp over the pairs whose rotations over the original context
// lie between beta_fast and beta_slow.
void yarn_frequencies(const model_config& c, std::vector<double>& f) {
  const auto& s = *c.rope_scaling;
  const double d = c.rotated_dims(), base = c.rope_theta, orig = s.original_max_position_embeddings;
  auto correction_dim = [&](double rotations) { return d * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(base)); };
  const double low = std::max(0.0, std::floor(correction_dim(s.beta_fast)));
  const double high = std::min(d - 1, std::ceil(correction_dim(s.beta_slow)));
  const double span = high > low ? high - low : 0.001;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / span, 0.0, 1.0);  // 0: extrapolate, 1: interpolate
    f[i] = f[i] / s.factor * ramp + f[i] * (1 - ramp);
  }
}

void llama3_frequencies(const rope_scaling_config& s, std::vector<double>& f) {
  // Long wavelengths are slowed by `factor`, short ones kept, a smooth blend between.
  const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (auto& x : f) {
    const double wavelen = 2 * M_PI / x;
    if (wavelen > low_wavelen) {
      x /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      x = (1 - smooth) * x / s.factor + smooth * x;
    }
  }
}

// partial_rotary_factor: the share of each head RoPE rotates (transformers reads it for every
// model), a whole even number of dimensions.
void read_partial_rotary(const hf_keys& k, model_config& c) {
  const double share = k.real_or("partial_rotary_factor", 1.0);
  const double dims = share * c.head_dim;
  if (!(share > 0 && share <= 1) || dims != std::floor(dims) || int(dims) % 2 != 0)
    throw input_error(k.source() + ": 'partial_rotary_factor' " + std::to_string(share) + " of head_dim " + std::to_string(c.head_dim) +
                      " is not a whole, even number of dimensions");
  if (share < 1) c.rotary_dim = int(dims);
}

}  // namespace

void read_rope_scaling(const json& j, const std::string& source, model_config& c) {
  read_partial_rotary(hf_keys(j, source), c);
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& r = j["rope_scaling"];
  if (!r.is_object()) throw input_error(source + ": key 'rope_scaling' must be an object, not " + r.dump());
  const hf_keys k(r, source + ": rope_scaling");
  const hf_keys top(j, source);
  rope_scaling_config s;
  s.type = k.has("rope_type") ? k.text_or("rope_type", "") : k.text_or("type", "");
  if (s.type == "su") s.type = "longrope";  // Phi-3's first configs' name for it
  if (s.type != "llama3" && s.type != "linear" && s.type != "longrope" && s.type != "yarn" && s.type != "dynamic" && s.type != "default")
    throw input_error(source + ": rope_scaling type '" + s.type + "' is not supported (llama3, linear, longrope, yarn, dynamic)");
  s.factor = k.real_or("factor", 1.0);
  s.low_freq_factor = k.real_or("low_freq_factor", 1.0);
  s.high_freq_factor = k.real_or("high_freq_factor", 4.0);
  s.original_max_position_embeddings =
      k.int_or("original_max_position_embeddings",
               top.int_or("original_max_position_embeddings", s.type == "yarn" ? c.max_position_embeddings : 8192));
  if (s.type == "longrope") read_longrope(k, c.max_position_embeddings, s);
  if (s.type == "yarn") read_yarn(k, s);
  if (s.type != "default") c.rope_scaling = s;
}

void check_rope_scaling(const std::string& source, const model_config& c) {
  if (!c.rope_scaling) return;
  const auto& s = *c.rope_scaling;
  auto positive = [&](double v, const std::string& key) {
    if (!(v > 0) || !std::isfinite(v)) throw input_error(source + ": 'rope_scaling." + key + "' must be a positive number, got " + std::to_string(v));
  };
  positive(s.factor, "factor");
  positive(s.attention_factor, "attention_factor");
  positive(s.original_max_position_embeddings, "original_max_position_embeddings");
  if (s.type == "yarn") positive(s.beta_fast, "beta_fast"), positive(s.beta_slow, "beta_slow");
  if (s.type == "dynamic" && (c.rotated_dims() <= 2 || !std::isfinite(rope_base(c))))
    throw input_error(source + ": 'rope_scaling.factor' " + std::to_string(s.factor) + ": dynamic NTK needs more than 2 rotated dimensions and a "
                      "stretched base that stays finite");
  if (s.type != "longrope") return;
  for (const auto* v : {&s.short_factor, &s.long_factor}) {
    if (v->size() != std::size_t(c.rotated_dims() / 2))
      throw input_error(source + ": rope_scaling's short_factor and long_factor need one entry per rotated pair, " +
                        std::to_string(c.rotated_dims() / 2) + ", not " + std::to_string(v->size()));
    for (double f : *v) positive(f, "short_factor/long_factor");
  }
}

std::vector<double> model_config::rope_inv_freq(bool local) const { return rope_frequencies(*this, local); }

double rope_base(const model_config& c) {
  if (!c.rope_scaling || c.rope_scaling->type != "dynamic" || c.rope_scaling->factor <= 1) return c.rope_theta;
  const double f = c.rope_scaling->factor, d = c.rotated_dims();
  return c.rope_theta * std::pow(f * f - (f - 1), d / (d - 2));
}

std::vector<double> rope_frequencies(const model_config& c, bool local) {
  const int dims = c.rotated_dims(), half = dims / 2;
  std::vector<double> f(static_cast<std::size_t>(half), 0.0);
  const double base = local && c.local_rope_theta > 0 ? c.local_rope_theta : rope_base(c);
  for (int i = 0; i < half; ++i) f[std::size_t(i)] = 1.0 / std::pow(base, double(2 * i) / dims);
  if (local && c.local_rope_theta > 0) return f;  // Gemma 3's windowed layers: unscaled
  if (c.rope_freq_factors.size() == f.size())  // a GGUF file's rope_freqs
    for (int i = 0; i < half; ++i) f[std::size_t(i)] /= c.rope_freq_factors[std::size_t(i)];
  if (!c.rope_scaling) return f;
  const auto& s = *c.rope_scaling;
  if (s.type == "linear") {
    for (auto& x : f) x /= s.factor;
  } else if (s.type == "longrope") {
    const auto& ext = c.max_position_embeddings > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
    for (int i = 0; i < half; ++i) f[std::size_t(i)] /= ext[std::size_t(i)];
  } else if (s.type == "yarn") {
    yarn_frequencies(c, f);
  } else if (s.type == "llama3") {
    llama3_frequencies(s, f);
  }
  return f;
}

json rope_scaling_json(const rope_scaling_config& s) {
  json j = {{"rope_type", s.type}, {"factor", s.factor}, {"original_max_position_embeddings", s.original_max_position_embeddings}};
  if (s.type == "llama3") j["low_freq_factor"] = s.low_freq_factor, j["high_freq_factor"] = s.high_freq_factor;
  if (s.type == "longrope") j["short_factor"] = s.short_factor, j["long_factor"] = s.long_factor, j["attention_factor"] = s.attention_factor;
  if (s.type == "yarn") j["beta_fast"] = s.beta_fast, j["beta_slow"] = s.beta_slow, j["attention_factor"] = s.attention_factor;
  return j;
}

}  // namespace troupe::model
