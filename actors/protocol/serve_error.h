// Errors that cross actors (and processes): a code the receiver acts on, and a detail people
// read. The detail is never parsed; what a receiver does depends on the code alone (the frontend
// maps it to an HTTP status, a node decides from it whether to try joining again).
#pragma once
#include <caf/all.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace troupe::actors {

enum class serve_errc : std::uint8_t {
  invalid = 1,   // the request is wrong: it fails everywhere (HTTP 400)
  overloaded,    // admission refused it for now; the context carries the seconds to wait (429)
  unavailable,   // no replica can take it now (503)
  join_later,    // a head refuses a node for now: it is starting, or the node's old link lingers
  join_refused,  // a head refuses a node for good: token, model, name
  not_found,     // what it names does not exist (HTTP 404): an adapter not loaded
};

// The category every serve_errc travels under.
inline caf::atom_value serve_category() { return caf::atom("troupe"); }

// `field`: the request's field at fault, when one is (an answer names it as its param).
caf::error make_serve_error(serve_errc code, std::string detail, double retry_after_s = 0, std::string field = "");
// The code of an error made by make_serve_error, nothing for any other.
std::optional<serve_errc> serve_code(const caf::error& err);
// An overloaded error's seconds to wait (0 for any other).
double serve_retry_after(const caf::error& err);
// The request field an error made by make_serve_error names ("" when none).
std::string serve_field(const caf::error& err);

}  // namespace troupe::actors
