// Measures the two ceilings a CPU forward pass is judged against: memory read bandwidth (what
// decode is bound by) and peak FP32 fused multiply-add throughput (what prefill is bound by).
#pragma once
#include <cstddef>

namespace troupe::kernels {

// Bytes per second read from a buffer of `bytes` (much larger than the caches), all threads,
// best of `repeats` passes.
double measure_read_bandwidth(std::size_t bytes = std::size_t(1) << 30, int repeats = 5);

// FP32 FLOP/s (2 per FMA) of independent FMA chains in registers on all threads, with the
// active ISA's widest vectors.
double measure_fma_peak();

}  // namespace troupe::kernels
