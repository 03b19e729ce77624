// TOML topologies: any text either becomes a validated topology (and places its replicas) or
// is refused with input_error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/common/error.h"
#include "topology/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto t = troupe::topology::parse_topology(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
    (void)troupe::topology::place_replicas(t);
    troupe::topology::check_kv_memory(t, "", std::size_t(1) << 34);
  } catch (const troupe::input_error&) {
  }
  return 0;
}
