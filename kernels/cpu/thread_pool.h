// A fixed pool of worker threads that the CPU kernels fan out on.
//
// parallel_for(n, fn) runs fn(i) for every i in [0, n), spread over the pool and the calling
// thread, and returns when all have finished. Calls from inside a task run inline (no nesting).
#pragma once
#include <cstddef>
#include <functional>

namespace troupe::kernels {

// Number of threads the kernels use (the caller included): TROUPE_THREADS or all cores.
int num_threads();

// Runs fn(i) for i in [0, n). fn must not throw.
void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);

}  // namespace troupe::kernels
