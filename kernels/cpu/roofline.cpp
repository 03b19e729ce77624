#include "kernels/cpu/roofline.h"

#include "kernels/cpu/simd.h"

namespace troupe::kernels::TROUPE_ISA {

// Sums `n` floats with 4 independent accumulators so loads, not adds, set the pace.
float read_sum(const float* p, std::size_t n) {
  vec16 a = zero16(), b = zero16(), c = zero16(), d = zero16();
  for (std::size_t i = 0; i + 64 <= n; i += 64) {
    // Ask for the data 4 KiB ahead, as the quantized kernels do: on a machine whose neighbours
    // load the memory system, more requests in flight read up to a fifth more, and a probe that
    // a kernel can beat is not a ceiling.
    for (std::size_t off = 0; off < 64; off += 16) __builtin_prefetch(p + i + 1024 + off, 0, 3);
    a = add16(a, load16(p + i));
    b = add16(b, load16(p + i + 16));
    c = add16(c, load16(p + i + 32));
    d = add16(d, load16(p + i + 48));
  }
  return hsum16(add16(add16(a, b), add16(c, d)));
}

// 12 independent FMA chains, `iters` rounds; returns a value so the work is not elided.
float fma_chains(std::size_t iters) {
  vec16 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = splat16(float(i) * 1e-3f);
  const vec16 m = splat16(0.999999f), c = splat16(1e-7f);
  for (std::size_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = fma16(acc[i], m, c);
  vec16 s = zero16();
  for (int i = 0; i < 12; ++i) s = add16(s, acc[i]);
  return hsum16(s);
}

// 12 independent chains of int8 multiply-adds with the instructions the quantized matmul uses
// on this ISA (quant_weight.h): AVX-512 VNNI's dpbusd, AVX2's maddubs + madd, plain integer
// multiply-adds. Returns the multiply-adds done, so the caller needs no per-ISA width; the
// sums go to `sink`, so the work is not elided.
#if defined(__AVX512F__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) std::size_t dot_chains(std::size_t iters, std::int32_t& sink) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  for (std::size_t it = 0; it < iters; ++it)
    for (auto& c : acc) c = _mm512_dpbusd_epi32(c, a, b);
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  sink = _mm512_reduce_add_epi32(s);
  return iters * 12 * 64;
}

// As dot_chains, but every `run` weights (run / 4 dots) each chain's sum is multiplied by a
// scale and added to a total, as the K-quant kernels do with their scales (kquant_weight.h).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) std::size_t scaled_dot_chains(std::size_t iters, std::size_t run,
                                                                                     std::int32_t& sink) {
  __m512i sub[12], tot[12];
  for (int i = 0; i < 12; ++i) sub[i] = _mm512_set1_epi32(i), tot[i] = _mm512_setzero_si512();
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1), scale = _mm512_set1_epi32(5);
  for (std::size_t it = 0; it < iters; ++it) {
    asm volatile("" : "+v"(a), "+v"(b), "+v"(scale));  // so the products are not hoisted
    for (std::size_t d = 0; d < run / 4; ++d)
      for (auto& c : sub) c = _mm512_dpbusd_epi32(c, a, b);
    for (int i = 0; i < 12; ++i) {
      tot[i] = _mm512_add_epi32(tot[i], _mm512_mullo_epi32(sub[i], scale));
      sub[i] = _mm512_setzero_si512();
    }
  }
  __m512i s = tot[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, tot[i]);
  sink = _mm512_reduce_add_epi32(s);
  return iters * (run / 4) * 12 * 64;
}
#elif defined(__AVX2__)
std::size_t dot_chains(std::size_t iters, std::int32_t& sink) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i b = _mm256_set1_epi8(-1), ones = _mm256_set1_epi16(1);
  __m256i a = _mm256_set1_epi8(3);
  for (std::size_t it = 0; it < iters; ++it) {
    asm volatile("" : "+x"(a));  // so the products are not hoisted out of the loop
    for (auto& c : acc) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
  }
  __m256i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, acc[i]);
  sink = _mm256_extract_epi32(s, 0);
  return iters * 12 * 32;
}

std::size_t scaled_dot_chains(std::size_t iters, std::size_t run, std::int32_t& sink) {
  __m256i sub[6], tot[6];
  for (int i = 0; i < 6; ++i) sub[i] = _mm256_set1_epi32(i), tot[i] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-1), scale = _mm256_set1_epi32(5);
  for (std::size_t it = 0; it < iters; ++it) {
    asm volatile("" : "+x"(a), "+x"(b), "+x"(scale));
    for (std::size_t d = 0; d < run / 4; ++d)
      for (auto& c : sub) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    for (int i = 0; i < 6; ++i) {
      tot[i] = _mm256_add_epi32(tot[i], _mm256_mullo_epi32(sub[i], scale));
      sub[i] = _mm256_setzero_si256();
    }
  }
  __m256i s = tot[0];
  for (int i = 1; i < 6; ++i) s = _mm256_add_epi32(s, tot[i]);
  sink = _mm256_extract_epi32(s, 0);
  return iters * (run / 4) * 6 * 32;
}
#else
std::size_t dot_chains(std::size_t iters, std::int32_t& sink) {
  std::int32_t acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = i;
  std::int32_t a = 3, b = -1;
  for (std::size_t it = 0; it < iters; ++it) {
    asm volatile("" : "+r"(a), "+r"(b));  // so the loop is not folded into one multiply
    for (auto& c : acc) c += a * b;
  }
  std::int32_t s = 0;
  for (int i = 0; i < 12; ++i) s += acc[i];
  sink = s;
  return iters * 12;
}

std::size_t scaled_dot_chains(std::size_t iters, std::size_t run, std::int32_t& sink) {
  std::int32_t sub[12], tot[12];
  for (int i = 0; i < 12; ++i) sub[i] = i, tot[i] = 0;
  std::int32_t a = 3, b = -1, scale = 5;
  for (std::size_t it = 0; it < iters; ++it) {
    asm volatile("" : "+r"(a), "+r"(b), "+r"(scale));
    for (std::size_t d = 0; d < run; ++d)
      for (auto& c : sub) c += a * b;
    for (int i = 0; i < 12; ++i) tot[i] += sub[i] * scale, sub[i] = 0;
  }
  std::int32_t s = 0;
  for (int i = 0; i < 12; ++i) s += tot[i];
  sink = s;
  return iters * run * 12;
}
#endif

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quant_weight.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(float, read_sum, (const float*, std::size_t))
TROUPE_DECLARE_ISA_VARIANTS(float, fma_chains, (std::size_t))
TROUPE_DECLARE_ISA_VARIANTS(std::size_t, dot_chains, (std::size_t, std::int32_t&))
TROUPE_DECLARE_ISA_VARIANTS(std::size_t, scaled_dot_chains, (std::size_t, std::size_t, std::int32_t&))

namespace troupe::kernels {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
std::atomic<float> sink{0};
std::atomic<std::int32_t> int_sink{0};
}  // namespace

double measure_read_bandwidth(std::size_t bytes, int repeats) {
  const std::size_t n = bytes / 4;
  // Memory as the weights get it (huge pages), so the probe measures the same kind of stream.
  const auto mem = alloc_weight_bytes(n * 4);
  float* buf = reinterpret_cast<float*>(mem.get());
  const std::size_t tasks = std::size_t(num_threads()) * 4;
  const std::size_t per = (n / tasks) / 64 * 64;
  parallel_for(tasks, [&](std::size_t t) { std::memset(buf + t * per, 1, per * 4); });  // first touch
  auto sum = TROUPE_PICK_ISA(read_sum);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(tasks, [&](std::size_t t) { sink.store(sum(buf + t * per, per), std::memory_order_relaxed); });
    best = std::max(best, double(per * tasks * 4) / seconds_since(t0));
  }
  return best;
}

double measure_fma_peak() {
  auto chains = TROUPE_PICK_ISA(fma_chains);
  const std::size_t iters = 5'000'000;
  const std::size_t tasks = std::size_t(num_threads());
  chains(iters);  // warm up clocks
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {  // best of 5: a neighbour's burst only lowers a trial
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(tasks, [&](std::size_t) { sink.store(chains(iters), std::memory_order_relaxed); });
    const double secs = seconds_since(t0);
    best = std::max(best, double(tasks) * double(iters) * 12 * 16 * 2 / secs);  // 12 chains x 16 lanes x 2 FLOPs
  }
  return best;
}

namespace {
// int8 operations/s of `chains` on all threads, best of 5 (a neighbour's burst only lowers a trial).
template <class Chains>
double best_dot_rate(std::size_t iters, Chains chains) {
  const std::size_t tasks = std::size_t(num_threads());
  std::int32_t warm = 0;
  chains(iters, warm);  // warm up clocks
  int_sink.store(warm, std::memory_order_relaxed);
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    std::atomic<std::size_t> macs{0};
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(tasks, [&](std::size_t) {
      std::int32_t sum = 0;
      macs.fetch_add(chains(iters, sum), std::memory_order_relaxed);
      int_sink.store(sum, std::memory_order_relaxed);
    });
    best = std::max(best, 2.0 * double(macs.load()) / seconds_since(t0));
  }
  return best;
}
}  // namespace

double measure_int8_dot_peak() {
  // The instructions the quantized matmul runs on.
  auto chains = TROUPE_PICK_ISA_FOR(quant_isa(), dot_chains);
  return best_dot_rate(quant_isa() == isa::scalar ? 20'000'000 : 2'000'000, chains);
}

double measure_scaled_dot_ceiling(std::size_t run) {
  auto chains = TROUPE_PICK_ISA_FOR(quant_isa(), scaled_dot_chains);
  const std::size_t iters = (quant_isa() == isa::scalar ? 20'000'000 : 8'000'000) / run;
  return best_dot_rate(iters, [&](std::size_t n, std::int32_t& sink) { return chains(n, run, sink); });
}

}  // namespace troupe::kernels
#endif
