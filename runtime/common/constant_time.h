// Comparing secrets (API keys, the cluster token) without leaking, through timing, how many
// leading bytes matched.
#pragma once
#include <string>

namespace troupe {

// Whether a equals b; reads every byte of `a` whatever the first difference.
inline bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() != b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= unsigned(static_cast<unsigned char>(a[i]) ^ (i < b.size() ? static_cast<unsigned char>(b[i]) : 0u));
  return diff == 0;
}

}  // namespace troupe
