// Facts about the machine this process runs on.
#pragma once
#include <cstddef>

namespace troupe {

// Memory this process may use: the physical memory, or the cgroup's limit when lower.
std::size_t machine_memory_bytes();

}  // namespace troupe
