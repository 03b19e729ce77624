// A serving cluster in virtual time: a discrete-event simulation that runs the policy code the
// real cluster runs, so its predictions follow the code rather than a model of it.
//  - Each arrival is placed by the router's policy (routing::registry: round_robin,
//    least_loaded, kv_aware and any registered one) over the replicas' loads as they are then.
//  - Each replica plans its steps with sched::plan_step over a real kv::kv_cache_manager:
//    chunked prefill, the token budget, admission, preemption, prefix hits and eviction.
//  - A step lasts what the step profile says for its tokens and the context they read (the
//    profile is fitted from `troupe bench engine` on the hardware to predict).
// A step's last computed position of a sequence yields its next token, as in the engine.
//  - Disaggregated (prefill_replicas > 0): arrivals go to the prefill replicas, whose step that
//    yields a request's first token also ends its stay there; its KV then travels for what the
//    transfer profile says for its tokens, and the router places it on a decode replica, which
//    admits it with its prompt computed.
//  - The router sees loads as the replicas last reported them (every report_interval_s),
//    plus what it placed since (routing::count_placement), as the real router does.
//  - Admission (admission::pool_queue, the real code): a pool holding max_queued requests
//    that have no first token yet refuses the next; a refused request is counted, not run.
//
//  - Replicas may share a device (several replicas in one process on a CPU): their steps then
//    take turns.
//  - The autoscaler (autoscale::signals_of and autoscale::decide, the real code) on an
//    aggregated pool: every interval it reads the replicas' states and loads and the recent
//    TTFT and ITL (admission::pool_latencies), and starts or drains replicas.
// A request's first token, and its stream to its last, cost what the profile's serving fit says
// beyond its steps.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/autoscale/autoscale.h"
#include "runtime/kv/block_hash.h"
#include "runtime/routing/policy.h"
#include "runtime/sched/scheduler.h"

namespace troupe::sim {

// Seconds of one engine step on the target hardware: a fixed cost, a cost per token computed,
// one per context position those tokens read (attention), and what a decode token (a running
// sequence's next one) costs beyond a prompt's token: decode rows run as matrix-vector work and
// attention per sequence, not as one matrix product.
struct step_profile {
  double base_s = 0;
  double per_token_s = 0;
  double per_context_s = 0;
  double per_decode_token_s = 0;
  double seconds(std::int64_t tokens, std::int64_t context_reads, std::int64_t decode_tokens = 0) const {
    return tokens == 0 ? 0.0
                       : base_s + per_token_s * double(tokens) + per_context_s * double(context_reads) +
                             per_decode_token_s * double(decode_tokens);
  }
};

// Seconds to move a request's KV from a prefill replica to a decode replica: a fixed cost and
// one per token (fitted from `troupe bench kv-transfer`).
struct transfer_profile {
  double base_s = 0;
  double per_token_s = 0;
  double seconds(std::int64_t tokens) const { return base_s + per_token_s * double(tokens); }
};

struct sim_request {
  double arrival_s = 0;
  int prompt_tokens = 1;
  int output_tokens = 1;
  // The hashes of the prompt's full blocks (sim_prompt_blocks): equal leading hashes are a
  // shared prefix the replicas' caches can hit.
  std::vector<kv::block_hash> blocks;
};

struct sim_config {
  int replicas = 1;          // in all
  int prefill_replicas = 0;  // of those, the prefill pool's; 0: aggregated (prefill and decode in one)
  sched::scheduler_config sched;
  int kv_blocks = 4096;  // per replica
  bool prefix_caching = true;
  std::string policy = "least_loaded";
  routing::policy_params params;
  double report_interval_s = 0;  // replicas report loads this often; 0: the router sees them as they are
  int max_queued = 0;            // per pool, requests without a first token; 0: no bound
  transfer_profile transfer;     // disaggregated only
  // What serving adds to a request's first token beyond its steps (the frontend: HTTP,
  // tokenizing, the first chunk on the wire), from `troupe bench serve --fit-profile`.
  double first_token_s = 0;
  // What serving adds once to a request's last token beyond its first's (tokens its stream held
  // back, from the same fit): its e2e and its mean inter-token time over its answer.
  double stream_s = 0;
  // How much one request's serving strays from those typical figures on the machine measured
  // (the same fit's requests, one by one): a request draws one of each, by its index, and its
  // first token comes that much later (or earlier) and each of its later tokens that much per
  // token. Only what its client sees moves: a replica is not held by it. Empty: no spread.
  std::vector<double> first_token_jitter_s, itl_jitter_s;
  // Replicas that share one device (its cores, or its GPU) by the device's index, per replica:
  // they take turns, one step at a time, in the order they became ready. Empty: a device each.
  std::vector<std::uint32_t> device;
  // kv_aware: ask a replica's cache how much of a prompt it holds only when holding all of it
  // could make that replica the policy's choice (the same choice, far fewer lookups at 1,000
  // replicas); false asks every replica holding its first block.
  bool bound_prefix_lookups = true;
  // With autoscale.enabled (an aggregated pool only): `replicas` serve at the start, and the
  // autoscaler keeps between autoscale_min and autoscale_max (0: replicas) serving. A replica it
  // adds serves replica_start_s later (0: a warm one); one it removes drains (takes no new
  // request, finishes what it holds) and stops.
  autoscale::autoscale_config autoscale;
  int autoscale_min = 1, autoscale_max = 0;
  double replica_start_s = 0;
};

struct request_outcome {
  double ttft_s = 0;      // arrival to first token
  double e2e_s = 0;       // arrival to last token
  double mean_itl_s = 0;  // (last - first token) / (tokens - 1); 0 for one token
  int cached_tokens = 0;  // of its prompt, found in its replica's prefix cache when first admitted
  int preemptions = 0;
  std::uint32_t replica = 0;  // the (prefill) replica that computed its prompt
  bool refused = false;       // by admission: never ran, its times are 0
};

struct sim_result {
  std::vector<request_outcome> requests;  // in the order given
  double end_s = 0;                       // virtual time of the last token
  std::uint64_t steps = 0;                // over all replicas
  std::size_t refused = 0;
  // The autoscaler's changes, and the replica-seconds the pool was provisioned for (serving,
  // starting, or draining what it holds); with a fixed pool, replicas times the run.
  struct scale_event {
    double at_s = 0;
    int from = 0, to = 0;
    std::string reason;
  };
  std::vector<scale_event> scaling;
  double replica_seconds = 0;
};

// Runs `requests` (in arrival order) to their last token. Throws input_error for a policy the
// registry does not know, a configuration plan_step cannot run (no replica, no blocks, no
// decode replica beside the prefill ones), or a request that can never fit a replica's KV blocks.
sim_result simulate(const sim_config& c, const step_profile& p, std::span<const sim_request> requests);

// A prompt's block hashes at `block_size`: from the trace's prefix block ids (Mooncake's, each
// of `trace_block_tokens` tokens; equal ids hash equally), then blocks of its own (salted by its
// `index`) up to its full blocks.
std::vector<kv::block_hash> sim_prompt_blocks(std::span<const std::int64_t> trace_blocks, int trace_block_tokens, std::size_t index,
                                              int prompt_tokens, int block_size);

}  // namespace troupe::sim
