#include "runtime/common/machine.h"

#include <unistd.h>

#include <algorithm>
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

std::size_t available_memory_bytes() {
  std::size_t avail = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") {
      avail = kb * 1024;
      break;
    }
  if (avail == 0) avail = machine_memory_bytes();
  std::ifstream max("/sys/fs/cgroup/memory.max"), cur("/sys/fs/cgroup/memory.current");
  std::string limit;
  std::size_t used = 0;
  if (max >> limit && limit != "max" && cur >> used) {
    try {
      const std::size_t l = std::stoull(limit);
      avail = std::min(avail, l > used ? l - used : 0);
    } catch (const std::exception&) {
    }
  }
  return avail;
}

}  // namespace troupe
