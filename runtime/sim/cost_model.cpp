#include "runtime/sim/cost_model.h"

#include <algorithm>

namespace troupe::sim {

namespace {
double layer_weights(const model::model_config& c) {
  const double h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), i = c.intermediate_size;
  return h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h;  // qkv, o, gate/up/down, two norms
}
}  // namespace

double parameter_count(const model::model_config& c) {
  const double embed = double(c.vocab_size) * c.hidden_size;
  return embed * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer_weights(c) + c.hidden_size;
}

double step_seconds(const model::model_config& c, const gpu_spec& g, const step_shape& s) {
  if (s.tokens == 0) return 0.0;
  const double head = double(c.vocab_size) * c.hidden_size;
  const double layers = c.num_hidden_layers * layer_weights(c);
  const double flops = 2.0 * (layers * s.tokens + head * s.logit_rows) +
                       4.0 * c.num_hidden_layers * c.q_dim() * double(s.context_reads);
  const double kv_bytes_per_position = 2.0 * c.num_hidden_layers * c.kv_dim() * g.bytes_per_kv;
  const double bytes = (layers + head) * g.bytes_per_weight + kv_bytes_per_position * double(s.context_reads);
  return std::max(flops / g.flops, bytes / g.bandwidth) + g.step_overhead_s;
}

}  // namespace troupe::sim
