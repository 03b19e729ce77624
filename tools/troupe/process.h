// Starting child processes: what troupe launch, the runtime bench and the process-level tests
// share.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace troupe::cli {

// Starts argv[0] (a path) with argv; its stdout goes to `stdout_fd` when >= 0. The child starts
// with no signals blocked, whatever the caller blocks. Throws input_error naming the program.
pid_t spawn_process(const std::vector<std::string>& argv, int stdout_fd = -1);

// The path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace troupe::cli
