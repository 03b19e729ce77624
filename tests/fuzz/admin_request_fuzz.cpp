// Admin requests from the network: any bytes either decode into a request or are refused with
// std::invalid_argument; a decoded request encodes and decodes to itself.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/admin/admin_message.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto r = troupe::admin::decode_request(bytes);
    const auto again = troupe::admin::decode_request(troupe::admin::encode(r));
    if (again.cmd != r.cmd || again.args != r.args || again.id != r.id) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  try {
    (void)troupe::admin::decode_reply(bytes);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
