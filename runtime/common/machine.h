// Facts about the machine this process runs on.
#pragma once
#include <cstddef>

namespace troupe {

// Memory this process may use: the physical memory, or the cgroup's limit when lower.
std::size_t machine_memory_bytes();

// Memory free for a new allocation now: /proc/meminfo's MemAvailable (within the cgroup's limit
// less its current use, when there is one); machine_memory_bytes() if neither can be read.
std::size_t available_memory_bytes();

}  // namespace troupe
