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
  if (cfg.qk_norm_whole && size > 1)  // a rank holds some heads; the norm's mean square is over all of them
    return "tensor_parallel = " + n + ": " + cfg.architecture + " norms each whole query and key projection, which a rank holds part of";
  if (cfg.moe) {
    if (cfg.moe->expert_intermediate_size < size)
      return "tensor_parallel = " + n + " exceeds the experts' " + std::to_string(cfg.moe->expert_intermediate_size) + " features";
    if (cfg.moe->shared_expert_intermediate_size > 0 && cfg.moe->shared_expert_intermediate_size < size)
      return "tensor_parallel = " + n + " exceeds the shared expert's " + std::to_string(cfg.moe->shared_expert_intermediate_size) +
             " features";
  }
  return std::nullopt;
}

std::optional<std::string> expert_parallel_mismatch(const model_config& cfg, int size) {
  const std::string n = std::to_string(size);
  if (size == 1) return std::nullopt;
  if (!cfg.moe) return "expert_parallel = " + n + " needs a mixture-of-experts model; " + cfg.architecture + " has no experts";
  if (cfg.moe->num_experts < size)
    return "expert_parallel = " + n + " exceeds the model's " + std::to_string(cfg.moe->num_experts) + " experts";
  if (cfg.num_key_value_heads % size)
    return "expert_parallel = " + n + " does not divide num_key_value_heads = " + std::to_string(cfg.num_key_value_heads) +
           " (attention is split over the same ranks)";
  if (cfg.num_attention_heads % size)
    return "expert_parallel = " + n + " does not divide num_attention_heads = " + std::to_string(cfg.num_attention_heads);
  if (cfg.qk_norm_whole)
    return "expert_parallel = " + n + ": " + cfg.architecture + " norms each whole query and key projection, which a rank holds part of";
  return std::nullopt;
}

}  // namespace troupe::model
