// An enum crosses the wire as one byte. On load, a byte past the enum's last value is refused
// (invalid_argument) rather than cast into a value no code handles: a peer of another version,
// or a damaged message, fails the message instead of the receiver.
#pragma once
#include <caf/all.hpp>

#include <cstdint>

namespace troupe::actors {

// For inspect(): f(..., byte, load_enum(byte, x.field, Enum::last_value), ...) with
// `byte` = static_cast<std::uint8_t>(x.field) declared before.
template <class Enum>
auto load_enum(const std::uint8_t& byte, Enum& into, Enum last) {
  return caf::meta::load_callback([&byte, &into, last]() -> caf::error {
    if (byte > static_cast<std::uint8_t>(last)) return caf::sec::invalid_argument;
    into = static_cast<Enum>(byte);
    return caf::none;
  });
}

}  // namespace troupe::actors
