#include "actors/protocol/error_text.h"

namespace troupe::actors {

std::string error_message(caf::actor_system& sys, const caf::error& err) {
  if (err == caf::sec::request_timeout) return "the request timed out";
  const caf::message& ctx = err.context();
  for (std::size_t i = 0; i < ctx.size(); ++i)
    if (ctx.match_element<std::string>(i)) return ctx.get_as<std::string>(i);
  return sys.render(err);
}

}  // namespace troupe::actors
