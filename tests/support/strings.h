// Every string over an alphabet up to a length: what the structured-output tests compare
// automata with independent matchers on.
#pragma once
#include <string>
#include <vector>

namespace troupe::test {

// Every string of length 0..max over `alphabet`, shortest first.
inline std::vector<std::string> all_strings(const std::string& alphabet, int max) {
  std::vector<std::string> out{""}, layer{""};
  for (int n = 0; n < max; ++n) {
    std::vector<std::string> next;
    for (const auto& s : layer)
      for (char c : alphabet) next.push_back(s + c);
    out.insert(out.end(), next.begin(), next.end());
    layer = std::move(next);
  }
  return out;
}

}  // namespace troupe::test
