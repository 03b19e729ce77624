// What a Jinja render may spend and the errors it raises (jinja.h), apart from the template
// class so the renderer's parts include them without including the class they implement.
#pragma once
#include <cstddef>
#include <stdexcept>

namespace troupe::chat {

class template_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A template's own raise_exception(): the conversation is wrong, not the template.
class template_raised : public template_error {
 public:
  using template_error::template_error;
};

// What one render may spend. A template comes from a model folder: it is code from outside, and
// `range(100000000)` must fail its request, not stall the server.
struct render_limits {
  std::size_t max_steps = 1'000'000;   // statements run, loop iterations, items range() makes, 256 B built
  std::size_t max_output = 16u << 20;  // bytes of output, and of any one string built
};

}  // namespace troupe::chat
