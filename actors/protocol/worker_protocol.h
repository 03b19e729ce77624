// The messages inside a replica: its scheduler, the group supervisor of its worker ranks, and
// the ranks. A replica's ranks run in its scheduler's process, so these messages stay local;
// they are still value types with `inspect` (registered by register_worker_protocol).
//
// One step: the scheduler sends execute(stage_input{plan}) to the supervisor, which cuts the
// plan into micro-batches and conducts them through the pipeline stages: every rank of a stage
// (its tensor-parallel ranks) gets the micro-batch and the hidden state, runs the stage's layers
// (adding up their partial sums with collectives), and the stage's first rank answers with the
// new hidden state, which goes to the next stage; the last stage's first rank answers with the
// tokens it chose. Stage s runs micro-batch m + 1 while stage s + 1 runs m.
#pragma once
#include <caf/all.hpp>

#include "actors/protocol/wire_enum.h"

#include <cstdint>
#include <vector>

#include "runtime/engine/executor.h"
#include "runtime/engine/forward_plan.h"
#include "runtime/kv/transfer/kv_handle.h"

namespace troupe::sampling {

// On the wire the optional seed travels as a flag and a value.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  bool has_seed = x.seed.has_value();
  std::uint64_t seed = x.seed.value_or(0);
  std::uint8_t constraint_type = std::uint8_t(x.constraint.type);
  auto restore_seed = caf::meta::load_callback([&]() -> caf::error {
    x.seed = has_seed ? std::optional<std::uint64_t>(seed) : std::nullopt;
    if (constraint_type > std::uint8_t(output_constraint::kind::tool_calls)) return caf::sec::invalid_argument;
    x.constraint.type = output_constraint::kind(constraint_type);
    return caf::none;
  });
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.min_p, x.repetition_penalty,
           x.presence_penalty, x.frequency_penalty, has_seed, seed, x.max_tokens, x.stop_token_ids, x.stop,
           x.ignore_eos, x.logprobs, x.logit_bias, x.min_tokens, x.include_stop_str_in_output, x.skip_special_tokens, constraint_type, x.prompt_logprobs,
           x.constraint.source, x.constraint.reasoning_start, x.constraint.reasoning_end, restore_seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_row& x) {
  return f(caf::meta::type_name("sampling_row"), x.params, x.seed, x.num_output, x.prompt_len, x.history, x.allowed, x.score);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.logprob, x.rank, x.top_ids, x.top_logprobs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_token& x) {
  return f(caf::meta::type_name("sampled_token"), x.token, x.logprobs);
}

}  // namespace troupe::sampling

namespace troupe::kv {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_cache_config& x) {
  auto type = static_cast<std::uint8_t>(x.type);
  auto load_type = actors::load_enum(type, x.type, kernels::last_dtype);
  return f(caf::meta::type_name("kv_cache_config"), x.num_blocks, x.block_size, type, load_type, x.shared,
           x.layer_group, x.layer_slot);
}

}  // namespace troupe::kv

namespace troupe::kv::transfer {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_layout& x) {
  auto type = static_cast<std::uint8_t>(x.type);
  auto load_type = actors::load_enum(type, x.type, kernels::last_dtype);
  return f(caf::meta::type_name("kv_layout"), type, load_type, x.block_size, x.num_layers, x.n_kv_heads, x.head_dim,
           x.model_key, x.ranks, x.tensor_parallel);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_source& x) {
  return f(caf::meta::type_name("kv_source"), x.key, x.shared, x.num_blocks, x.host_id, x.pid, x.host, x.port, x.secret);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_handle& x) {
  return f(caf::meta::type_name("kv_handle"), x.request, x.layout, x.sources, x.blocks, x.positions);
}

}  // namespace troupe::kv::transfer

namespace troupe::model {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, row_span& x) {
  return f(caf::meta::type_name("row_span"), x.first, x.count);
}

}  // namespace troupe::model

namespace troupe::engine {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.tokens, x.seconds, x.expert_tokens, x.pooled);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forward_plan& x) {
  return f(caf::meta::type_name("forward_plan"), x.tokens, x.positions, x.seq_of_token, x.tables, x.group_tables, x.logit_rows,
           x.sampling, x.pools);
}

}  // namespace troupe::engine

namespace troupe::actors {

// What one rank receives: the step's plan and, past rank 0, the hidden state [T][hidden] the
// previous rank produced.
struct stage_input {
  engine::forward_plan plan;
  std::vector<float> hidden;
};

// What a rank answers: the stage's output hidden state (from the first rank of a stage that is
// not the last), or the tokens it chose from the logits of plan.logit_rows (the last stage's
// first rank; never the logits themselves). Other ranks answer empty.
struct stage_output {
  std::vector<float> hidden;
  engine::step_result result;
};

// Pull a sequence's KV from another replica into blocks the scheduler reserved (`table`): the
// supervisor hands it to a helper thread that fills every rank's cache, so the ranks keep
// stepping meanwhile. Answers with the bytes moved, or an error saying why it failed.
struct kv_pull {
  kv::transfer::kv_handle from;
  kv::transfer::kv_layout mine;
  std::vector<std::int32_t> table;
  kv::transfer::backend how = kv::transfer::backend::automatic;
  std::int64_t timeout_ms = 0;  // from when the supervisor receives it
};

// A group's state, for the scheduler's load report, tests and the admin console.
struct group_status {
  std::uint32_t ranks = 0;     // pipeline stages x tensor ranks
  std::uint32_t restarts = 0;  // whole-group restarts since the group started
  std::uint32_t pipeline = 1, tensor = 1;
  std::uint64_t generation = 1;  // of the group's ranks and collectives
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_input& x) {
  return f(caf::meta::type_name("stage_input"), x.plan, x.hidden);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_pull& x) {
  auto how = static_cast<std::uint8_t>(x.how);
  auto load_how = actors::load_enum(how, x.how, kv::transfer::backend::nccl);
  return f(caf::meta::type_name("kv_pull"), x.from, x.mine, x.table, how, load_how, x.timeout_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_status& x) {
  return f(caf::meta::type_name("group_status"), x.ranks, x.restarts, x.pipeline, x.tensor, x.generation);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_output& x) {
  return f(caf::meta::type_name("stage_output"), x.hidden, x.result);
}

using execute_atom = caf::atom_constant<caf::atom("execute")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using ranks_atom = caf::atom_constant<caf::atom("ranks")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using kv_sources_atom = caf::atom_constant<caf::atom("kvsources")>;
using fault_atom = caf::atom_constant<caf::atom("fault")>;

using crash_rank_atom = caf::atom_constant<caf::atom("crashrank")>;

// One worker rank: tensor rank t of pipeline stage s, holding its shard of a range of layers and
// the KV tensors of exactly those layers and heads. Its role (prefill, decode or both) is its
// replica's.
using worker_actor = caf::typed_actor<
    // Run this rank's part of a micro-batch (see stage_output).
    caf::replies_to<execute_atom, stage_input>::with<stage_output>,
    // Fault injection: die inside the n-th collective from now (1 = the next), while the other
    // ranks of the stage wait in it.
    caf::reacts_to<fault_atom, std::int32_t>,
    // Fault injection: the rank's whole process dies (SIGKILL) inside the n-th collective from
    // now; for ranks in a process of their own (on another node).
    caf::reacts_to<crash_rank_atom, std::int32_t>,
    // Copy a sequence's KV from another replica into this rank's reserved blocks (its layers and
    // heads), off its thread: the bytes. For ranks not in the supervisor's process.
    caf::replies_to<pull_atom, kv_pull>::with<std::uint64_t>>;

// How a node agent starts one rank of a group whose supervisor is elsewhere (group_config's
// rank_nodes): rank `tensor_rank` of stage `stage`, over layers [first, last), its KV cache of
// `cache`'s geometry, its stage's collectives joined through `rendezvous` (Gloo, listening on
// `host`). The rank ends with `supervisor`.
struct rank_spec {
  std::string group;  // names the group in the collectives' keys and messages
  std::uint64_t generation = 1;
  std::int32_t stage = 0, tensor_rank = 0, tensor_ranks = 1;
  bool expert_parallel = false;
  std::int32_t first = 0, last = 0;
  bool last_stage = false;
  kv::kv_cache_config cache;  // the geometry of its KV cache (the group's)
  std::string host = "127.0.0.1";
  std::int64_t timeout_ms = 120000;  // of each collective and of the connect
  caf::actor rendezvous;   // null: the stage has one rank, no collectives
  caf::actor supervisor;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_spec& x) {
  return f(caf::meta::type_name("rank_spec"), x.group, x.generation, x.stage, x.tensor_rank, x.tensor_ranks, x.expert_parallel,
           x.first, x.last, x.last_stage, x.cache, x.host, x.timeout_ms, x.rendezvous, x.supervisor);
}

// The started rank and where its KV can be pulled from.
struct rank_started {
  worker_actor rank;
  kv::transfer::kv_source source;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_started& x) {
  return f(caf::meta::type_name("rank_started"), x.rank, x.source);
}

// The supervisor of a replica's ranks. If any rank dies, every rank is stopped and a fresh set
// (with empty KV) is spawned: the group restarts as a whole, and the scheduler recomputes what
// the lost KV held. Past its restart limit the supervisor gives up and exits, which ends the
// replica (the request owner then moves its requests).
using group_actor = caf::typed_actor<
    // One step, conducted through the stages. Fails if a rank dies or a collective fails while
    // it runs (the group has then restarted).
    caf::replies_to<execute_atom, stage_input>::with<engine::step_result>,
    // Copy a sequence's KV from another replica into every rank's reserved blocks: the bytes.
    caf::replies_to<pull_atom, kv_pull>::with<std::uint64_t>,
    // Answers once every rank death seen before it was handled (the group is whole again).
    caf::replies_to<ready_atom>::with<group_status>,
    // Restart the group now (a step timed out: a rank may be hung).
    caf::replies_to<restart_atom>::with<group_status>,
    // The current ranks, stage by stage, tensor ranks in order (fault injection and inspection).
    caf::replies_to<ranks_atom>::with<std::vector<worker_actor>>>;

void register_worker_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
