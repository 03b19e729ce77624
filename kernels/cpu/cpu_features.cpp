#include "kernels/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace troupe::kernels {
namespace {

isa probe() {
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // F16C has no __builtin_cpu_supports name in GCC 12; every AVX2 CPU shipped has it.
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  isa best = avx512 ? isa::avx512 : avx2 ? isa::avx2 : isa::scalar;
  if (const char* env = std::getenv("TROUPE_ISA")) {
    if (std::strcmp(env, "scalar") == 0) best = isa::scalar;
    if (std::strcmp(env, "avx2") == 0 && best == isa::avx512) best = isa::avx2;
  }
  return best;
}

std::atomic<isa>& active() {
  static std::atomic<isa> a{detected_isa()};
  return a;
}

}  // namespace

const char* isa_name(isa i) {
  switch (i) {
    case isa::scalar: return "scalar";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
  }
  return "?";
}

isa detected_isa() {
  static const isa best = probe();
  return best;
}

bool cpu_has_avx512_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
}

isa active_isa() { return active().load(std::memory_order_relaxed); }

bool set_active_isa(isa i) {
  if (static_cast<int>(i) > static_cast<int>(detected_isa())) return false;
  active().store(i, std::memory_order_relaxed);
  return true;
}

}  // namespace troupe::kernels
