#include "runtime/common/machine.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace troupe {

std::size_t machine_memory_bytes() {
  std::size_t bytes = std::size_t(sysconf(_SC_PHYS_PAGES)) * std::size_t(sysconf(_SC_PAGESIZE));
  std::ifstream in("/sys/fs/cgroup/memory.max");  // cgroup v2; "max" when unlimited
  std::string limit;
  if (in >> limit && limit != "max") {
    try {
      const std::size_t l = std::stoull(limit);
      if (l > 0 && l < bytes) bytes = l;
    } catch (const std::exception&) {
    }
  }
  return bytes;
}

}  // namespace troupe
