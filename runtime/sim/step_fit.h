// The simulator's step profile fitted to steps measured on the hardware to predict, and the
// profile file that carries it (`troupe bench engine --fit-profile FILE` writes one; `troupe
// bench sim --profile FILE` and the planner read it). A sample is a step's tokens, the context
// positions they read and its measured seconds; the fit is least squares of the relative errors
// over the samples with every coefficient at least 0 (a negative cost per token would reward
// larger batches).
#pragma once
#include <cstdint>
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
};

// Throws input_error when there is no sample with tokens, or a sample's time is not a positive
// finite number.
step_profile fit_step_profile(std::span<const step_sample> samples);

// The steps `troupe bench engine --json` measured: its prefill (one step of its prompt, reading
// p(p+1)/2 positions) and each decode row (batch B at context C: B tokens reading B(C+1)).
// Throws input_error naming `source` and the field when the object lacks them.
std::vector<step_sample> engine_bench_samples(const nlohmann::json& bench, const std::string& source);

// The profile file: {"step": {"base_s", "per_token_s", "per_context_s"}, "samples": N,
// "worst_error": the largest |fitted - measured| / measured over them, "source": what was
// measured}. Reading throws input_error naming the path and the field.
struct profile_file {
  step_profile step;
  std::size_t samples = 0;
  double worst_error = 0;
  std::string source;
};
profile_file fit_profile_file(std::span<const step_sample> samples, const std::string& source);
std::string format_profile_file(const profile_file& p);
profile_file parse_profile_file(const std::string& text, const std::string& path);

}  // namespace troupe::sim
