// Regular expressions from clients (guided_regex, JSON Schema patterns): any pattern either is
// refused with input_error or compiles, within its budget, to a DFA whose every transition
// names a state it has; the DFA then walks the pattern's own bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/common/error.h"
#include "runtime/structured/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string pattern(reinterpret_cast<const char*>(data), size);
  troupe::structured::regex_budget budget;
  budget.max_nfa_states = 20000;
  budget.max_dfa_states = 2000;
  budget.max_work = 20'000'000;
  try {
    const auto d = troupe::structured::compile_regex(pattern, budget);
    if (d.next.size() != std::size_t(d.states()) * 256 || d.start < 0 || d.start >= d.states()) std::abort();
    for (auto n : d.next)
      if (n < -1 || n >= d.states()) std::abort();
    (void)d.matches(pattern);
  } catch (const troupe::input_error&) {
  }
  return 0;
}
