// The messages between the request owner, the scheduler of a replica and whoever receives a
// request's tokens. Value types with `inspect`, registered once (register_engine_protocol).
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/worker_protocol.h"
#include "runtime/engine/request.h"

namespace troupe::sampling {

// On the wire the optional seed travels as a flag and a value.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  bool has_seed = x.seed.has_value();
  std::uint64_t seed = x.seed.value_or(0);
  auto restore_seed = caf::meta::load_callback([&]() -> caf::error {
    x.seed = has_seed ? std::optional<std::uint64_t>(seed) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.min_p, x.repetition_penalty,
           x.presence_penalty, x.frequency_penalty, has_seed, seed, x.max_tokens, x.stop_token_ids, x.stop,
           x.ignore_eos, x.logprobs, x.logit_bias, x.min_tokens, x.include_stop_str_in_output, restore_seed);
}

}  // namespace troupe::sampling

namespace troupe::actors {

// A request for one replica: prompt + tokens generated so far (non-empty after a migration,
// so the replica continues the sequence instead of restarting it) and sampling parameters.
struct generate_request {
  std::string id;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> generated;  // already streamed to the client; not sent again
  sampling::sampling_params params;     // max_tokens counts generated + new tokens
  std::int32_t priority = 0;
  // Disaggregated serving: a prefill replica stops after the first token and hands the KV
  // over (finish_reason "handoff"); a decode replica gets that KV here and does not recompute
  // it (empty: recompute, as after a migration).
  bool prefill_only = false;
  std::vector<float> kv;
};

// One request's progress in one step.
struct token_update {
  std::string id;
  std::vector<std::int32_t> tokens;  // new this step
  std::string text;                  // text those tokens completed
  bool finished = false;
  std::string finish_reason;         // "stop", "length", "abort", or an error message
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;    // total, including tokens generated before a migration
  // Per token of `tokens` when the request asked for logprobs: the chosen token's, and the top
  // N ids with theirs.
  std::vector<float> logprobs;
  std::vector<std::vector<std::int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
  // On the final update: queue, prefill and decode time on the replica that finished it.
  double queue_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  std::int32_t migrations = 0;  // times the request moved so far (set by the request owner)
  std::vector<float> kv;         // finish_reason "handoff": the KV for the decode replica
};

// Everything one step produced for one destination: tokens travel once per step per
// destination, never one message per token per request.
struct token_batch {
  std::uint64_t step = 0;
  std::vector<token_update> updates;
};

// A replica's load as its scheduler reports it (to the router, the admin console, tests).
struct load_report {
  std::int32_t running_seqs = 0;
  std::int32_t waiting_seqs = 0;
  std::int32_t waiting_prompt_tokens = 0;
  std::int32_t used_blocks = 0;
  std::int32_t total_blocks = 0;
  std::uint64_t steps = 0;
  double forward_seconds = 0;  // total time in the forward pass (for runtime-overhead figures)
  std::uint64_t kv_losses = 0; // steps lost to a worker group restart (their KV recomputed)
  std::uint64_t preemptions = 0;
  std::uint64_t prompt_tokens_computed = 0;  // includes recomputation; not KV imported
  std::uint64_t generated_tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_report& x) {
  return f(caf::meta::type_name("load_report"), x.running_seqs, x.waiting_seqs, x.waiting_prompt_tokens,
           x.used_blocks, x.total_blocks, x.steps, x.forward_seconds, x.kv_losses, x.preemptions, x.prompt_tokens_computed, x.generated_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generate_request& x) {
  return f(caf::meta::type_name("generate_request"), x.id, x.prompt, x.generated, x.params, x.priority,
           x.prefill_only, x.kv);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_update& x) {
  return f(caf::meta::type_name("token_update"), x.id, x.tokens, x.text, x.finished, x.finish_reason,
           x.prompt_tokens, x.output_tokens, x.logprobs, x.top_ids, x.top_logprobs, x.queue_seconds,
           x.prefill_seconds, x.decode_seconds, x.migrations, x.kv);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_batch& x) {
  return f(caf::meta::type_name("token_batch"), x.step, x.updates);
}

// Receives a replica's token batches (the request owner, or a test).
using token_sink = caf::typed_actor<caf::reacts_to<token_batch>>;

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using group_atom = caf::atom_constant<caf::atom("group")>;

// The scheduler of one replica.
using scheduler_actor = caf::typed_actor<
    // Queue a request; its tokens go to the sink. Replies true, or an error naming what was
    // wrong with the request (nothing is queued then).
    caf::replies_to<submit_atom, generate_request, token_sink>::with<bool>,
    // End a request now and free its blocks; its final update (reason "abort") follows.
    caf::reacts_to<abort_atom, std::string>,
    // The replica's current load.
    caf::replies_to<load_atom>::with<load_report>,
    // The supervisor of the replica's worker ranks (sim replicas have none: an error).
    caf::replies_to<group_atom>::with<group_actor>,
    // Internal: run one engine step (the actor sends it to itself while it has work).
    caf::reacts_to<step_atom>>;

// Adds every message type of this protocol to a config. Call once per actor system.
void register_engine_protocol(caf::actor_system_config& cfg);

// The engine request a generate_request stands for, and back (the KV copied between the
// engine's shared buffer and the message's own).
engine::request to_engine_request(const generate_request& r);
generate_request to_generate_request(const engine::request& r);

}  // namespace troupe::actors
