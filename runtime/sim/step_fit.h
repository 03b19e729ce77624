// The simulator's step profile fitted to steps measured on the hardware to predict, and the
// profile file that carries it (`troupe bench engine --fit-profile FILE` writes one; `troupe
// bench sim --profile FILE` and the planner read it). A sample is a step's tokens, the context
// positions they read and its measured seconds; the fit is least squares of the relative errors
// over the samples with every coefficient at least 0 (a negative cost per token would reward
// larger batches).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/sim/cluster_sim.h"

namespace troupe::sim {

struct step_sample {
  std::int64_t tokens = 0;
  std::int64_t context_reads = 0;
  double seconds = 0;
  std::int64_t decode_tokens = 0;  // of `tokens`, running sequences' next tokens
};

// Throws input_error when there is no sample with tokens, or a sample's time is not a positive
// finite number.
step_profile fit_step_profile(std::span<const step_sample> samples);

// The steps `troupe bench engine --json` measured: its prefill (one step of its prompt, reading
// p(p+1)/2 positions), the shorter prefills of "prefill_fit" when present (--fit-profile times a
// quarter and a half of the prompt, so attention's quadratic cost is told apart from the
// per-token one) and each decode row (batch B at context C: B decode tokens reading B(C+1)).
// Throws input_error naming `source` and the field when the object lacks them.
std::vector<step_sample> engine_bench_samples(const nlohmann::json& bench, const std::string& source);

// The KV transfer's cost per byte moved, fitted to `troupe bench kv-transfer` pulls (a pull of
// B bytes in s seconds is a sample of B "tokens": the same fit, with no context term).
struct transfer_fit {
  double base_s = 0;
  double per_byte_s = 0;
  std::string source;  // the backend and machine it was measured on
};
struct transfer_sample {
  double bytes = 0;
  double seconds = 0;
};
transfer_fit fit_transfer(std::span<const transfer_sample> samples, const std::string& source);

// The profile file: {"step": {"base_s", "per_token_s", "per_context_s"}, "samples": N,
// "worst_error": the largest |fitted - measured| / measured over them, "source": what was
// measured, "kv_bytes_per_token": the model's KV per token, "tensor_parallel": the ranks of the
// replica measured (1), "transfer": {"base_s", "per_byte_s", "source"} once `troupe bench
// kv-transfer --fit-profile` added it, "serving": {"step_s", "first_token_s", "source", and
// "stream_s", "first_token_jitter_s" and "itl_jitter_s" (lists) when fitted} once `troupe bench serve --fit-profile` added it, and "handoff_s" once
// it ran against a disaggregated server}. Reading throws input_error naming the path and
// the field.
struct profile_file {
  step_profile step;
  std::size_t samples = 0;
  double worst_error = 0;
  std::string source;
  double kv_bytes_per_token = 0;  // 0: not recorded
  int tensor_parallel = 1;
  std::optional<transfer_fit> transfer;
  // What a server adds to each step and to a request's first token beyond the forward passes
  // (scheduling, streaming, the frontend), measured at concurrency 1 where nothing queues.
  struct serving_fit {
    double step_s = 0, first_token_s = 0;
    std::string source;
    // What a served disaggregated handoff adds to the KV copy the transfer fit prices (the
    // receiver's claim, the pull's thread, the messages between the replicas), fitted by the
    // same command against a disaggregated server; 0 until then.
    double handoff_s = 0;
    // What a request's stream adds once between its first token and its last beyond its steps:
    // tokens the delivery path holds and hands on in bursts (a step's tokens wait for a worker
    // of the actor system), so its last token reaches the client later than it was computed.
    // Spread over a short answer's few tokens it raises that request's mean inter-token time
    // most. 0 when the requests fitted all had one length (it is then not told from step_s).
    double stream_s = 0;
    // Each fitted request's own figures less the typical ones above: its TTFT's and its mean
    // inter-token time's (sim_config's jitter). Empty in files written before them.
    std::vector<double> first_token_jitter_s, itl_jitter_s;
  };
  std::optional<serving_fit> serving;
  // The step as served: the fitted forward plus the serving's cost per step.
  step_profile served_step() const;
  // Into `c`: what serving adds to a request's first token and to its stream, and how much
  // requests stray from that (nothing without a serving fit).
  void price_serving(sim_config& c) const;
  // A request token's KV transfer cost, a served handoff's own included; throws input_error
  // naming `path` when the file has no transfer fit or no KV size per token to price it with.
  transfer_profile transfer_cost(const std::string& path) const;
  // The copy alone, as transfer_cost but without the served handoff's cost.
  transfer_profile copy_cost(const std::string& path) const;
};
profile_file fit_profile_file(std::span<const step_sample> samples, const std::string& source);

// A request served with nothing queued (`troupe bench serve --concurrency 1 --fit-profile`): its
// prompt and output tokens (two or more), its TTFT and its end, seconds from its start.
struct served_request {
  std::int64_t prompt_tokens = 0;
  int output_tokens = 2;
  double ttft_s = 0, e2e_s = 0;
};
// What serving adds beyond the forward p.step prices, from `served` (not empty). Per request,
// its first-to-last-token time less its decode steps (each priced at its mid-answer context) is
// a line in its decode steps: serving's cost per step is the slope and the stream's the
// intercept, fitted as medians (the median of the slopes between every two requests of
// different lengths, then the median intercept), so a few requests the machine slowed move
// neither. With one answer length only, the per-step cost is the median per step and the
// stream's 0. The first token's is the median of each TTFT less its prompt's prefill as one
// step. Every figure is at least 0. Each request's own TTFT and mean inter-token time less
// what those figures give it are its jitters. A handoff p fitted before is kept.
profile_file::serving_fit fit_serving(const profile_file& p, std::span<const served_request> served, const std::string& source);
// Whether `served` (not empty) has answers of more than one length, which fit_serving needs to
// tell a stream's cost from a step's.
bool tells_stream_apart(std::span<const served_request> served);
// What a served disaggregated handoff adds to the copy p's transfer fit prices, from `served` (not
// empty, p with a serving fit): the median, at least 0, of each request's time from its first
// token to its last less its decode steps as served, its stream and the copy. Throws as
// transfer_cost.
double fit_handoff(const profile_file& p, std::span<const served_request> served, const std::string& path);
std::string format_profile_file(const profile_file& p);
profile_file parse_profile_file(const std::string& text, const std::string& path);
// The file at `path`, read or (re)written whole: input_error as "--FLAG: cannot read PATH" (or
// write) when the file cannot be, and as parse_profile_file when it is not a profile.
profile_file read_profile_file(const std::string& path, const std::string& flag);
void write_profile_file(const std::string& path, const profile_file& p, const std::string& flag);

}  // namespace troupe::sim
