// Grammars and schemas from clients (guided_grammar, response_format json_schema): any text is
// either refused with input_error or compiles within its budget to a grammar whose matcher then
// walks bytes of the input without crashing, growing past its stack budget or leaving a state
// it cannot key. The first byte picks the format: even GBNF, odd JSON Schema.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/common/error.h"
#include "runtime/structured/gbnf.h"
#include "runtime/structured/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  troupe::structured::grammar_budget budget;
  budget.max_elements = 50000;
  budget.max_rules = 20000;
  try {
    const auto g = data[0] % 2 == 0 ? troupe::structured::parse_gbnf(text, budget)
                                    : troupe::structured::compile_json_schema(text, budget);
    troupe::structured::grammar_matcher m(g);
    for (char c : text) {
      if (!m.accept(static_cast<unsigned char>(c))) break;
      if (m.stacks().size() > std::size_t(budget.max_stacks)) std::abort();
      for (const auto& s : m.stacks())
        if (s.size() > std::size_t(budget.max_stack_depth) + 1) std::abort();
    }
    (void)m.key();
    (void)m.complete();
  } catch (const troupe::input_error&) {
  }
  return 0;
}
