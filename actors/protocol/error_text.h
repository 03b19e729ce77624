// Errors from other actors as people read them.
#pragma once
#include <caf/all.hpp>

#include <string>

namespace troupe::actors {

// The message an actor put in the error, without CAF's "system_error(code, ...)" wrapping;
// "the request timed out" for a timeout; CAF's rendering when there is no message.
std::string error_message(caf::actor_system& sys, const caf::error& err);

}  // namespace troupe::actors
