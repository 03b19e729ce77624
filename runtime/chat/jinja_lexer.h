// The Jinja subset's expression tokens (jinja.h): what is inside {{ }} and {% %}. Internal.
#pragma once
#include <string>
#include <vector>

namespace troupe::chat::jinja {

// ---------------------------------------------------------------------------------------------
// Expression tokens.

struct token {
  enum class type { name, string, integer, real, op, end } t = type::end;
  std::string text;
  long long i = 0;
  double d = 0;
};

// The tokens of one tag's source; `line` names it in errors. Ends with a token of type end.
std::vector<token> tokenize(const std::string& src, int line);

}  // namespace troupe::chat::jinja
