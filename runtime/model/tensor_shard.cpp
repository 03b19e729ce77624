#include "runtime/model/tensor_shard.h"

namespace troupe::model {

std::optional<std::string> tensor_parallel_mismatch(const model_config& cfg, int size) {
  const std::string n = std::to_string(size);
  if (size < 1) return "tensor_parallel must be at least 1, not " + n;
  if (cfg.num_key_value_heads % size)
    return "tensor_parallel = " + n + " does not divide num_key_value_heads = " + std::to_string(cfg.num_key_value_heads);
  if (cfg.num_attention_heads % size)
    return "tensor_parallel = " + n + " does not divide num_attention_heads = " + std::to_string(cfg.num_attention_heads);
  if (cfg.intermediate_size < size)
    return "tensor_parallel = " + n + " exceeds intermediate_size = " + std::to_string(cfg.intermediate_size);
  return std::nullopt;
}

}  // namespace troupe::model
