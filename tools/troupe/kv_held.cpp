#include "tools/troupe/kv_held.h"

#include <algorithm>

#include "runtime/engine/engine.h"

namespace troupe::cli {

namespace {

// One prompt of `context - 2` positions and two tokens, through an engine whose executor only
// simulates (the block manager, the scheduler and the plans are the engine's own): the bytes its
// pages hold once the prompt is in, per position.
double bytes_held_per_token(const model::model_config& c, kernels::dtype kv_type, int context, bool free_windows) {
  engine::engine_config cfg;
  cfg.kv_type = kv_type;
  cfg.free_windows = free_windows;
  cfg.prefix_caching = false;
  cfg.max_model_len = context;
  const std::size_t whole = kv::kv_cache::bytes_per_token(kv_type, c.num_hidden_layers, c.num_key_value_heads, c.head_dim);
  cfg.kv_memory_bytes = whole * std::size_t(context + cfg.sched.max_num_batched_tokens) * 2;  // room to keep it whole
  auto e = engine::sim_engine(c, sim::gpu_spec{}, cfg);
  engine::request r;
  r.id = "long";
  r.prompt.assign(std::size_t(context - 2), 1);
  r.params.max_tokens = 2;  // what it holds after the prompt is read while it is still running
  r.params.ignore_eos = true;
  e.add_request(std::move(r));
  int held = 0;
  while (e.has_unfinished()) {
    e.step();
    if (e.has_unfinished()) held = std::max(held, e.kv().num_used());
  }
  const int slots = engine::kv_window_groups(cfg, c).slots(c.num_hidden_layers);
  const double page_bytes = double(kv::kv_cache::bytes_per_token(kv_type, slots, c.num_key_value_heads, c.head_dim)) * cfg.sched.block_size;
  return held * page_bytes / context;
}

}  // namespace

nlohmann::json kv_held_per_token(const model::model_config& shape, kernels::dtype kv_type, int context) {
  if (!engine::kv_window_groups(engine::engine_config{}, shape).split()) return nullptr;
  model::model_config c = shape;  // the accounting only: any context the caller asks about
  c.max_position_embeddings = std::max(c.max_position_embeddings, context);
  const double paged = bytes_held_per_token(c, kv_type, context, true), kept = bytes_held_per_token(c, kv_type, context, false);
  return {{"context", context}, {"window_pages_bytes_per_token", paged}, {"every_position_bytes_per_token", kept},
          {"ratio", paged / kept}};
}

}  // namespace troupe::cli
