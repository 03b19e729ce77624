// Measures the ceilings a CPU forward pass is judged against: memory read bandwidth (what
// decode is bound by) and peak FP32 fused multiply-add or, for quantized projections, int8
// dot-product throughput (what prefill is bound by).
#pragma once
#include <cstddef>

namespace troupe::kernels {

// Bytes per second read from a buffer of `bytes` (much larger than the caches), all threads,
// best of `repeats` passes.
double measure_read_bandwidth(std::size_t bytes = std::size_t(1) << 30, int repeats = 5);

// FP32 FLOP/s (2 per FMA) of independent FMA chains in registers on all threads, with the
// active ISA's widest vectors.
double measure_fma_peak();

// int8 operations/s (2 per multiply-add) of independent dot-product chains on all threads, with
// the instructions the quantized matmul uses here (VNNI, AVX2 or plain): the compute ceiling
// of quantized projections, which an FP32 FMA peak understates by about four times.
double measure_int8_dot_peak();

// The same with a scale applied every `run` weights (a multiply and an add per chain, as the
// K-quant kernels apply theirs every 16 weights): the most a format with scales that fine can
// reach in registers, with no memory traffic and nothing else of a forward pass around it.
double measure_scaled_dot_ceiling(std::size_t run);

}  // namespace troupe::kernels
