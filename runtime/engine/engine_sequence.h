// The engine's private records (engine.cpp and engine_speculation.cpp): a live sequence, and
// the step the executor has. Not for use outside the engine.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/output_processor.h"
#include "runtime/engine/request.h"
#include "runtime/kv/block_hash.h"
#include "runtime/kv/connector.h"
#include "runtime/model/lora.h"
#include "runtime/sampling/sampling_params.h"
#include "runtime/speculative/policy.h"
#include "runtime/structured/constraint.h"

namespace troupe::engine {

struct live_sequence {  // engine::sequence
  std::uint64_t id = 0;
  std::string name;
  std::uint64_t arrival = 0;
  int priority = 0;
  std::vector<std::int32_t> tokens;  // prompt then output
  int prompt_len = 0;
  int num_computed = 0;
  int cached_tokens = -1;  // prompt tokens its first admission found in the prefix cache (-1: not admitted yet)
  sampling::sampling_params params;
  std::uint64_t seed = 0;
  output_stream out;
  bool prefill_only = false;
  kv::connector::incoming kv_in;      // KV to pull once admitted (blocks reserved), and its pull
  double transfer_seconds = 0;
  kv::hash_keys keys;                     // how its blocks are keyed in the prefix cache
  // The LoRA adapter it runs with (null: the base): held here, so unloading the adapter lets the
  // sequences already running with it finish.
  std::shared_ptr<const model::lora_adapter> adapter;
  std::vector<kv::block_hash> hashes;     // of its full blocks so far
  using clock = std::chrono::steady_clock;
  clock::time_point arrived = clock::now();
  std::optional<clock::time_point> first_scheduled, first_token;
  bool speculate = true;                 // the request lets it propose
  speculative::acceptance acceptance;    // of its proposals so far
  int probe_wait = 0;                    // steps without proposing, while its acceptance is below the floor
  int draft_tokens = 0, accepted_tokens = 0;
  std::unique_ptr<structured::constrained_output> constraint;  // null: unconstrained
  // Prompt logprobs: how many prompt positions are scored (position k scores token k + 1),
  // those not yet sent, and whether they went out (with the first token).
  int scored = 0;
  std::vector<sampling::token_logprobs> prompt_lps;
  bool prompt_lps_sent = false;
  bool wants_scores() const { return params.prompt_logprobs >= 0 && scored < prompt_len - 1; }
  // An embedding (request::embed): the prompt positions pooled so far and their hidden states'
  // sum; with mean or CLS pooling it needs position 0 on, so it never takes a cached prefix.
  bool embed = false;
  bool pools_from_start = false;
  int pooled = 0;
  std::vector<double> pool_sum;

  int num_output() const { return int(tokens.size()) - prompt_len; }
};

struct pending_step {  // engine::pending: the step the executor has
  std::vector<std::uint64_t> ids;   // scheduled sequences, in plan order
  std::vector<int> new_tokens;      // tokens each computes this step
  std::vector<int> logit_row;       // its (first) row in the result, or -1 (a prefill chunk)
  std::vector<int> score_row, score_count;  // its prompt positions scored (rows score_row ...)
  std::vector<int> pool_span, pooled_to;    // an embedding's: its index in plan.pools (or -1), and the position pooled up to
  std::vector<std::vector<std::int32_t>> proposed;  // tokens it verifies (rows logit_row + 1 ...)
  std::size_t rows = 0;             // tokens the forward computes
  std::size_t logit_rows = 0;
  std::size_t pools = 0;            // spans pooled (embeddings)
  bool computes = false;            // the plan has tokens (a forward ran)
  std::vector<request_output> out;  // aborts finished before the step
};

}  // namespace troupe::engine
