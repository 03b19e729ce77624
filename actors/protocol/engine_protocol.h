// The messages between the request owner, the scheduler of a replica and whoever receives a
// request's tokens. Value types with `inspect`, registered once (register_engine_protocol).
#pragma once
#include <caf/all.hpp>

#include "actors/protocol/wire_enum.h"

#include <cstdint>
#include <string>
#include <vector>

#include "actors/protocol/worker_protocol.h"
#include "runtime/engine/engine_stats.h"
#include "runtime/engine/request.h"
#include "runtime/kv/kv_events.h"


namespace troupe {

// Typed ids travel as their number.
template <class Inspector, class Tag, class Rep>
typename Inspector::result_type inspect(Inspector& f, id<Tag, Rep>& x) {
  return f(caf::meta::type_name("id"), x.value);
}

}  // namespace troupe

namespace troupe::kv {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_event& x) {
  auto kind = static_cast<std::uint8_t>(x.kind);
  auto load_kind = actors::load_enum(kind, x.kind, kv_event_kind::cleared);
  return f(caf::meta::type_name("kv_event"), kind, load_kind, x.hashes, x.parent, x.has_parent, x.token_ids, x.block_size,
           x.medium);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_event_batch& x) {
  auto type = static_cast<std::uint8_t>(x.kv_type);
  auto load_type = actors::load_enum(type, x.kv_type, kernels::last_dtype);
  return f(caf::meta::type_name("kv_event_batch"), x.replica, x.generation, x.seq, x.timestamp, x.events, type, load_type);
}

}  // namespace troupe::kv

namespace troupe::engine {

// The one request type: what a client's request owner submits is what the engine queues.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request& x) {
  return f(caf::meta::type_name("request"), x.id, x.prompt, x.generated, x.params, x.priority, x.prefill_only, x.kv_from,
           x.cache_salt, x.public_prefix, x.adapter, x.model, x.allow_fallback, x.user, x.split_side, x.trace_id, x.speculate, x.text_returned, x.embed);
}

}  // namespace troupe::engine

namespace troupe::actors {

// One request's progress in one step.
struct token_update {
  std::string id;
  std::vector<std::int32_t> tokens;  // new this step
  std::string text;                  // text those tokens completed
  bool finished = false;
  engine::finish_reason reason = engine::finish_reason::none;  // set when finished
  std::string error;                 // reason error: what went wrong
  std::int32_t prompt_tokens = 0;
  std::int32_t cached_tokens = 0;    // of the prompt, found in the prefix cache of the replica that first ran it
  std::int32_t output_tokens = 0;    // total, including tokens generated before a migration
  std::int32_t text_tokens = 0;      // of them, those whose text has been sent (the rest come with the next)
  // Per token of `tokens` when the request asked for logprobs: the chosen token's, and the top
  // N ids with theirs.
  std::vector<float> logprobs;
  std::vector<std::vector<std::int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
  // With the first token of a request that asked for prompt logprobs: one per prompt token
  // after the first.
  std::vector<sampling::token_logprobs> prompt_logprobs;
  std::vector<float> embedding;  // on the final update of an embedding request
  // On the final update: queue, prefill and decode time on the replica that finished it.
  double queue_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  std::int32_t migrations = 0;  // times the request moved so far (set by the request owner)
  double transfer_seconds = 0;  // on the final update: its KV's pull into this replica
  // On the final update: tokens it proposed on the replica that finished it, and those accepted.
  std::int32_t draft_tokens = 0, accepted_tokens = 0;
  kv::transfer::kv_handle kv;   // reason handoff: where the decode replica pulls the KV from
  // Set once, before any token, on an update of its own: admission sent the request to its
  // model's fallback, this model (the topology's name) answers it.
  std::string served_by;
};

// Everything one step produced for one destination: tokens travel once per step per
// destination, never one message per token per request.
struct token_batch {
  std::uint64_t step = 0;
  std::vector<token_update> updates;
};

// A replica's load as its scheduler reports it (to the router, the admin console, tests):
// the engine's counters as they are (engine::engine_stats: steps, forward seconds, tokens,
// preemptions, KV losses and pulls, experts, speculation), with what the replica's scheduler and
// its KV cache add. One type from the engine to the router, the console and /metrics.
struct load_report : engine::engine_stats {
  std::int32_t running_seqs = 0;
  std::int32_t waiting_seqs = 0;
  std::int32_t waiting_prompt_tokens = 0;
  std::int32_t used_blocks = 0;
  std::int32_t total_blocks = 0;
  std::uint64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  std::uint64_t prefix_hits = 0;     // of them, found cached
  std::int32_t cached_blocks = 0;    // blocks findable in the prefix cache now
  // Handed-off requests whose blocks this replica holds (or relays) for a receiver now.
  std::int32_t handoffs_held = 0;
  // Draining: admits nothing, hands what it holds to other replicas; drained once it also
  // holds no request and no handed-off KV (safe to remove).
  bool draining = false;
  // In the warm pool: serving no one by every head's choice (a label the replica carries so
  // that all heads' routers agree on it; it runs whatever it is given).
  bool parked = false;
  // The cache key of the weights it runs ("<fingerprint>@<revision>"): which revision of its
  // pool's model this replica serves (a swap changes it replica by replica).
  std::string model_key;
  bool drained() const { return draining && running_seqs == 0 && waiting_seqs == 0 && handoffs_held == 0; }
};

}  // namespace troupe::actors

namespace troupe::engine {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  return f(caf::meta::type_name("engine_stats"), x.steps, x.forward_seconds, x.last_forward_seconds, x.prompt_tokens_computed,
           x.generated_tokens, x.preemptions, x.kv_losses, x.recomputed_after_loss, x.prefix_waits, x.kv_pulls, x.kv_pull_failures,
           x.kv_pull_bytes, x.kv_pull_seconds, x.expert_tokens, x.spec_drafts, x.spec_draft_tokens, x.spec_accepted_tokens,
           x.spec_accepted_per_pos, x.spec_propose_seconds);
}

}  // namespace troupe::engine

namespace troupe::actors {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_report& x) {
  return f(caf::meta::type_name("load_report"), static_cast<engine::engine_stats&>(x), x.running_seqs, x.waiting_seqs,
           x.waiting_prompt_tokens, x.used_blocks, x.total_blocks, x.prefix_queries, x.prefix_hits, x.cached_blocks,
           x.handoffs_held, x.draining, x.parked, x.model_key);
}


template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_update& x) {
  auto reason = static_cast<std::uint8_t>(x.reason);
  auto load_reason = actors::load_enum(reason, x.reason, engine::finish_reason::transfer_failed);
  return f(caf::meta::type_name("token_update"), x.id, x.tokens, x.text, x.finished, reason, load_reason, x.error,
           x.prompt_tokens, x.cached_tokens, x.output_tokens, x.text_tokens, x.logprobs, x.top_ids, x.top_logprobs, x.prompt_logprobs, x.embedding, x.queue_seconds,
           x.prefill_seconds, x.decode_seconds, x.migrations, x.transfer_seconds, x.draft_tokens, x.accepted_tokens, x.kv);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_batch& x) {
  return f(caf::meta::type_name("token_batch"), x.step, x.updates);
}

// Receives a replica's token batches (the request owner, or a test).
using token_sink = caf::typed_actor<caf::reacts_to<token_batch>>;

// Receives a replica's KV events (the router, or a test): one batch per step that changed the
// prefix cache, numbered from 1 within each generation of the replica.
using kv_event_sink = caf::typed_actor<caf::reacts_to<kv::kv_event_batch>>;

// Everything a replica's prefix cache holds now, after its batch `seq` of `generation`.
struct kv_snapshot {
  std::uint64_t generation = 0;
  std::uint64_t seq = 0;
  std::vector<kv::block_hash> hashes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_snapshot& x) {
  return f(caf::meta::type_name("kv_snapshot"), x.generation, x.seq, x.hashes);
}

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using group_atom = caf::atom_constant<caf::atom("group")>;
using wake_atom = caf::atom_constant<caf::atom("wake")>;
using kv_subscribe_atom = caf::atom_constant<caf::atom("kvsub")>;
using handoff_atom = caf::atom_constant<caf::atom("handoff")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using claim_atom = caf::atom_constant<caf::atom("claim")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using park_atom = caf::atom_constant<caf::atom("park")>;
using slow_atom = caf::atom_constant<caf::atom("slow")>;
using replica_atom = caf::atom_constant<caf::atom("replica")>;
using retire_atom = caf::atom_constant<caf::atom("retire")>;
using lora_atom = caf::atom_constant<caf::atom("lora")>;
using held_atom = caf::atom_constant<caf::atom("held")>;

// The scheduler of one replica.
using scheduler_actor = caf::typed_actor<
    // Queue a request; its tokens go to the sink. Replies true, or an error naming what was
    // wrong with the request (nothing is queued then).
    caf::replies_to<submit_atom, engine::request, token_sink>::with<bool>,
    // The same for a request whose KV another replica (the scheduler `holder`) computed and
    // holds: this replica reserves its blocks, pulls the KV (request::kv_from) and then tells
    // the holder to release it (release_atom), whether the pull worked or not.
    caf::replies_to<handoff_atom, engine::request, caf::actor, token_sink>::with<bool>,
    // A receiver is about to pull a handed-off request's KV held here: true if it still is, and
    // then it stays held until released or for another hold period (a receiver's pull must not
    // read blocks that were freed and reused meanwhile).
    caf::replies_to<claim_atom, std::string>::with<bool>,
    // A receiver is done with a handed-off request's KV held here: free its blocks.
    caf::reacts_to<release_atom, std::string>,
    // End a request now and free its blocks; its final update (reason "abort") follows.
    caf::reacts_to<abort_atom, std::string>,
    // The ids of the requests here whose tokens go to `sink` (queued or running), answered after
    // every message the sink's owner sent before: how a request owner reconciles its book with
    // the replica's (a request one lost is moved, one the other lost is aborted).
    caf::replies_to<held_atom, token_sink>::with<std::vector<std::string>>,
    // The replica's current load.
    caf::replies_to<load_atom>::with<load_report>,
    // Load LoRA adapter NAME from the PEFT folder DIR (read on this replica's host): replies with
    // its identity (model::lora_identity), or an error naming what is wrong with it.
    caf::replies_to<lora_atom, std::string, std::string>::with<std::string>,
    // Unload the adapter of this identity: new requests naming it are refused, running ones
    // finish with it. Replies whether it was loaded.
    caf::replies_to<lora_atom, std::string>::with<bool>,
    // Drain: from now on every request here is handed off to another replica at the end of the
    // step, with the KV it has computed (the receiver pulls it), and requests that arrive are
    // passed on the same way. Replies true once nothing is left here (safe to remove).
    caf::replies_to<drain_atom>::with<bool>,
    // Ends a drain: the replica admits and runs requests again (a pending drain answers false).
    caf::reacts_to<resume_atom>,
    // Joins (true) or leaves (false) the warm pool: reported in its load, which every head's
    // router follows.
    caf::reacts_to<park_atom, bool>,
    // Fault injection (the admin console's `slow`): each step waits this many milliseconds
    // first, as on a slower machine or after a performance regression; 0 ends it.
    caf::reacts_to<slow_atom, std::int32_t>,
    // Send this replica's KV events to the sink from now on, stamped with replica id `r`;
    // replies with what the prefix cache holds now. A sink that dies is dropped.
    caf::replies_to<kv_subscribe_atom, replica_id, kv_event_sink>::with<kv_snapshot>,
    // The supervisor of the replica's worker ranks (sim replicas have none: an error).
    caf::replies_to<group_atom>::with<group_actor>,
    // Internal: run one engine step (the actor sends it to itself while it has work).
    caf::reacts_to<step_atom>,
    // Internal: a sim step's time has passed.
    caf::reacts_to<wake_atom>,
    // Internal: the hold of handoff number N of a request expired (nobody pulled it in time).
    caf::reacts_to<hold_atom, std::string, std::uint64_t>,
    // From the replica's worker group, at each (re)start: where its caches can be pulled from.
    caf::reacts_to<kv_sources_atom, std::vector<kv::transfer::kv_source>>>;

// Adds every message type of this protocol to a config. Call once per actor system.
void register_engine_protocol(caf::actor_system_config& cfg);

}  // namespace troupe::actors
