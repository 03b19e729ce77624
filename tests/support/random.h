// Deterministic test data.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace troupe::test {

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace troupe::test
