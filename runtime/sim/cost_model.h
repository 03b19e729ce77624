// How long one engine step would take on a GPU, from the model's sizes and the GPU's FLOP/s and
// memory bandwidth: a roofline (the larger of compute time and memory time) plus a fixed
// per-step overhead. Drives the sim backend, which exercises the control plane at cluster
// sizes this machine cannot compute.
#pragma once
#include <cstdint>

#include "runtime/model/model_config.h"

namespace troupe::sim {

struct gpu_spec {
  double flops = 989e12;           // FLOP/s
  double bandwidth = 3.35e12;      // bytes/s
  double step_overhead_s = 200e-6;
  double bytes_per_weight = 2.0;   // bf16 weights
  double bytes_per_kv = 2.0;       // bf16 KV cache
  double speedup = 1.0;            // simulated seconds per wall second (a step waits time / speedup)
};

// The work of one step: tokens computed, and the context positions their attention reads.
struct step_shape {
  std::int64_t tokens = 0;
  std::int64_t context_reads = 0;  // sum over tokens of the positions each attends to
  std::int64_t logit_rows = 0;     // tokens whose logits are computed (LM head)
};

// Weights in the model (embeddings, layers, LM head).
double parameter_count(const model::model_config& c);

// Seconds for one step: max(FLOPs / flops, bytes / bandwidth) + overhead; 0 for an empty step.
double step_seconds(const model::model_config& c, const gpu_spec& g, const step_shape& s);

}  // namespace troupe::sim
