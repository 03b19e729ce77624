#include "actors/protocol/serve_error.h"

namespace troupe::actors {

caf::error make_serve_error(serve_errc code, std::string detail, double retry_after_s, std::string field) {
  return caf::error(static_cast<std::uint8_t>(code), serve_category(),
                    caf::make_message(std::move(detail), retry_after_s, std::move(field)));
}

std::optional<serve_errc> serve_code(const caf::error& err) {
  if (err.category() != serve_category()) return std::nullopt;
  return static_cast<serve_errc>(err.code());
}

double serve_retry_after(const caf::error& err) {
  const caf::message& ctx = err.context();
  if (serve_code(err) != serve_errc::overloaded || ctx.size() < 2 || !ctx.match_element<double>(1)) return 0;
  return ctx.get_as<double>(1);
}

std::string serve_field(const caf::error& err) {
  const caf::message& ctx = err.context();
  if (!serve_code(err) || ctx.size() < 3 || !ctx.match_element<std::string>(2)) return "";
  return ctx.get_as<std::string>(2);
}

}  // namespace troupe::actors
