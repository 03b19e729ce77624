// What goes into the engine (a request) and what comes out of it each step (its new tokens).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kv/transfer/kv_handle.h"
#include "runtime/sampling/sampler.h"

namespace troupe::engine {

struct request {
  std::string id;                     // unique among live requests
  std::vector<std::int32_t> prompt;   // token ids
  // Output tokens produced elsewhere before this request came here (a migration): they count
  // as output for max_tokens, penalties and the seeded draw's position, and are not returned.
  std::vector<std::int32_t> generated;
  sampling::sampling_params params;
  int priority = 0;                   // lower runs first under priority order
  // Disaggregated prefill: the request ends after its first new token with reason handoff,
  // its blocks held (release_held) until the workers exported its KV for a decode replica.
  bool prefill_only = false;
  // Where the KV of every token of prompt + generated except the last generated one can be
  // pulled from (the replica that prefilled it). The engine reserves the blocks when it admits
  // the request, has the executor pull into them, and computes from there instead of
  // recomputing the prompt. Needs at least one generated token. Empty: computed here.
  kv::transfer::kv_handle kv_from;
  // Prefix-cache isolation: blocks are shared only between requests with the same salt (a
  // tenant), except the first `public_prefix` tokens (a prompt the topology made public),
  // whose whole blocks every tenant shares.
  std::string cache_salt;
  std::int32_t public_prefix = 0;
  // The LoRA adapter it runs with, by identity (model::lora_identity, "NAME@FINGERPRINT"), which
  // must be loaded on the engine (engine::load_adapter); empty: the base model. Its blocks are
  // keyed apart from the base's and every other adapter's (kv::root_hash).
  std::string adapter;
  // The topology's model it is for ([models.NAME]'s NAME; empty: [model]): the router places it
  // only on that model's replicas, and an engine serving another refuses it.
  std::string model;
  // Whether admission may send it to its model's fallback instead of refusing it (the request
  // owner decides, before it starts; an engine never reads it).
  bool allow_fallback = false;
  // Who sends it (the API's `user`): a canary rollout keeps one sender on one revision
  // (routing::canary_side); empty: the request alone decides (its id). An engine never reads it.
  std::string user;
  // Pins it to one side of its model's canary rollout (the X-Troupe-Split header: a replay
  // measuring each side): 1 the canary, 0 the baseline, -1 the side `user` draws. An engine
  // never reads it.
  std::int8_t split_side = -1;
  // What log lines about it carry: the client's X-Request-Id, or the id the frontend made.
  std::string trace_id;
  // False: this request never proposes tokens, whatever its pool's speculation (its output is
  // the same either way; only its speed differs).
  bool speculate = true;
  // Of `generated`, how many had their text returned to the client (the rest ended inside a
  // UTF-8 character whose bytes the next token completes, so their text comes with it). -1: all.
  std::int32_t text_returned = -1;
  // An embedding: the engine computes the prompt, pools its hidden states as the model's
  // pooling config says (model_config::pooling) and ends the request (reason stop) with the
  // embedding, generating nothing. Refused for a model without one.
  bool embed = false;
};

// Why a request ended here. handoff: a prefill replica passed it on with its KV; error: it
// failed outside the engine (its replica was lost and it could not be placed again);
// transfer_failed: its KV could not be pulled and the policy says to prefill it again elsewhere.
enum class finish_reason : std::uint8_t { none, stop, length, abort, handoff, error, transfer_failed };

const char* finish_reason_name(finish_reason r);

// A request's progress in one step. Every accepted request yields exactly one output with
// finished = true, whatever ends it (stop, length or abort).
struct request_output {
  std::string id;
  std::vector<std::int32_t> new_tokens;  // tokens sampled this step
  std::string text_delta;                // text they completed (empty without a tokenizer)
  bool finished = false;
  finish_reason reason = finish_reason::none;
  int num_prompt_tokens = 0;
  int cached_tokens = 0;      // of the prompt, found in the prefix cache when it was first admitted
  int num_output_tokens = 0;  // total so far
  int text_tokens = 0;        // output tokens whose text has been returned (request::text_returned)
  std::vector<sampling::token_logprobs> logprobs;  // per new token, when the request asked
  // With its first token, when the request asked for prompt logprobs: one per prompt token
  // after the first (sampling_params::prompt_logprobs).
  std::vector<sampling::token_logprobs> prompt_logprobs;
  std::vector<float> embedding;  // on the final output of an embedding request (request::embed)
  // Set on the final output: seconds from arrival to first scheduled (queue), from then to the
  // first token (prefill), and from the first token to the end (decode), on this replica.
  double queue_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  // Set on the final output of a request whose KV was pulled here: seconds from its blocks'
  // reservation to the last byte in place.
  double transfer_seconds = 0;
  // Set on the final output: tokens this request proposed on this replica and how many of them
  // its output took (speculative decoding).
  int draft_tokens = 0, accepted_tokens = 0;
  // reason handoff: where its KV can be pulled from; its blocks are held until
  // engine::release_handoff.
  kv::transfer::kv_handle kv;
};

}  // namespace troupe::engine
