#include "runtime/admission/pool_latencies.h"

namespace troupe::admission {

std::vector<pool_latency> pool_latencies::at(clock::time_point now) const {
  auto age = [&](const average& a) { return a.at ? std::chrono::duration<double>(now - *a.at).count() : -1.0; };
  std::vector<pool_latency> out;
  for (const auto& [name, p] : pools_) out.push_back({name, p.ttft.value, p.itl.value, age(p.ttft), age(p.itl)});
  return out;
}

}  // namespace troupe::admission
