// OpenAI request bodies: any bytes either parse into a request or are refused with api_error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/api/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (auto kind : {troupe::api::endpoint::completions, troupe::api::endpoint::chat}) {
    try {
      auto r = troupe::api::parse_request(body, kind);
      (void)r.messages.dump();
    } catch (const troupe::api::api_error& e) {
      (void)e.body().dump();
    }
  }
  return 0;
}
