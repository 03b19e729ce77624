#include "topology/engine_settings.h"

#include <algorithm>

#include "runtime/common/error.h"
#include "runtime/model/fingerprint.h"
#include "runtime/model/synth.h"
#include "runtime/model/tensor_shard.h"
#include "runtime/model/model_source.h"

namespace troupe::topology {

engine::engine_config engine_config_of(const topology_config& topo, const std::string& model) {
  const model_spec& spec = *topo.model_named(model);
  engine::engine_config ec;
  ec.served_model = model;
  ec.sched = topo.scheduler.limits;
  ec.kv_type = topo.scheduler.kv_dtype;
  ec.kv_memory_bytes = topo.scheduler.kv_memory_bytes;
  ec.max_model_len = spec.max_model_len;
  ec.prefix_caching = topo.scheduler.prefix_caching;
  ec.kv_shared_memory = topo.kv_transfer.shared_memory;
  ec.transfer_backend = topo.kv_transfer.backend;
  ec.transfer_timeout = topo.kv_transfer.timeout;
  ec.handoff_hold = topo.kv_transfer.hold;
  ec.on_transfer_failure = topo.kv_transfer.retry_on_failure ? engine::engine_config::transfer_failure::retry
                                                             : engine::engine_config::transfer_failure::recompute;
  // KV that travels between a model's prefill and decode pools goes by whole layers: every
  // replica of a disaggregated model keeps its windowed layers' KV for every position.
  for (const auto& p : topo.pools)
    if (p.model == model && p.role != pool_role::both) ec.free_windows = false;
  ec.max_adapters = topo.lora.max_adapters;
  for (const auto& a : topo.lora.adapters) ec.start_adapters.emplace_back(a.name, a.path);
  // Every process of the cluster computes the same key from the same topology (the join
  // checks they serve the same models), so their block hashes agree. Another model, or another
  // revision of one, has another key: no block of one is ever found for the other.
  if (spec.backend == backend_kind::sim) {
    ec.model_key = model::shape_fingerprint(sim_shape(spec));
  } else {
    try {
      ec.model_key = model::model_fingerprint(spec.path);
    } catch (const input_error&) {
      ec.model_key = "path:" + spec.path;  // not readable from here: the loader says why
    }
  }
  if (!spec.revision.empty()) ec.model_key += "@" + spec.revision;
  return ec;
}

void check_groups(const topology_config& topo, const model::model_config& m, const std::string& model) {
  const int num_layers = m.num_hidden_layers;
  std::vector<pool_spec> pools;  // this model's: KV moves only between replicas of one model
  for (const auto& p : topo.pools)
    if (p.model == model) pools.push_back(p);
  if (pools.empty()) return;
  for (const auto& p : pools) {
    const std::string at = topo.source + ":" + std::to_string(p.line) + ": ";
    if (p.expert_parallel > 1) {
      if (auto why = model::expert_parallel_mismatch(m, p.expert_parallel))
        throw input_error(at + "pools.expert_parallel: pool \"" + p.name + "\": " + *why);
    } else if (auto why = model::tensor_parallel_mismatch(m, p.tensor_parallel)) {
      throw input_error(at + "pools.tensor_parallel: pool \"" + p.name + "\": " + *why);
    }
    if (std::max(p.tensor_parallel, p.expert_parallel) > 1 && topo.kv_store.enabled())
      throw input_error(at + "pools.tensor_parallel: pool \"" + p.name +
                        "\" splits its KV heads over ranks, which the [kv_store] cannot hold yet; remove one of them");
    if (p.pipeline_parallel > num_layers)
      throw input_error(topo.source + ":" + std::to_string(p.line) + ": pools.pipeline_parallel: pool \"" + p.name +
                        "\" splits the model's " + std::to_string(num_layers) + " layers over " +
                        std::to_string(p.pipeline_parallel) + " ranks; at most one rank per layer");
  }
  // KV moves between any two replicas (handoffs, drains, migrations) rank by rank, so every pool
  // splits its KV heads over the same number of ranks.
  auto heads_split = [](const pool_spec& p) { return std::max(p.tensor_parallel, p.expert_parallel); };
  for (const auto& p : pools)
    if (heads_split(p) != heads_split(pools.front()))
      throw input_error(topo.source + ":" + std::to_string(p.line) + ": pools.tensor_parallel: pool \"" + p.name + "\" splits KV heads over " +
                        std::to_string(heads_split(p)) + " ranks and pool \"" + pools.front().name + "\" over " +
                        std::to_string(heads_split(pools.front())) +
                        "; KV moves between replicas only between equal splits, so every pool needs the same");
}

model::model_config sim_shape(const model_spec& m) {
  if (!m.preset.empty()) {
    model::synth_options o;
    o.preset = m.preset;
    return model::synth_config(o);
  }
  return model::load_model_config(m.path);
}

}  // namespace troupe::topology
