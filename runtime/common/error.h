// The error type of the runtime's expected failures (bad model files, bad requests, bad config).
#pragma once
#include <stdexcept>
#include <string>

namespace troupe {

// Thrown where input from outside (a file, a request) is wrong; what() names the input and the
// offending part (file and tensor, field and value). Never used for internal bugs (asserts are).
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace troupe
