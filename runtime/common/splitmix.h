// SplitMix64's finalizer: a fixed, documented 64-bit mixing function. Seeded draws (sampling,
// benchmark workloads) hash (seed, position) with it, so results repeat across runs, batches
// and machines.
#pragma once
#include <cstdint>

namespace troupe {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace troupe
