// A model folder's small files: the first input byte picks config.json (parse_model_config)
// or a safetensors file (header and tensor table, read through a memory file as from disk).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/common/error.h"
#include "runtime/model/model_config.h"
#include "runtime/model/config_json.h"
#include "runtime/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool safetensors = data[0] & 1;
  ++data, --size;
  try {
    if (!safetensors) {
      auto c = troupe::model::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
      (void)c.rope_inv_freq();
      return 0;
    }
    const int fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) return 0;
    if (::write(fd, data, size) != ssize_t(size)) {
      ::close(fd);
      return 0;
    }
    try {
      troupe::model::safetensors_file f("/proc/self/fd/" + std::to_string(fd));
      for (auto& [name, t] : f.tensors()) (void)t.type();
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  } catch (const troupe::input_error&) {
  }
  return 0;
}
