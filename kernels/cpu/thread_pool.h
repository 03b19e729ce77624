// A fixed pool of worker threads that the CPU kernels fan out on.
//
// parallel_for(n, fn) runs fn(i) for every i in [0, n), spread over the pool and the calling
// thread, and returns when all have finished. Calls from inside a task run inline (no nesting).
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace troupe::kernels {

// Number of threads the kernels use (the caller included): TROUPE_THREADS or all cores.
int num_threads();

// Runs fn(i) for i in [0, n). fn must not throw.
void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);

// Cuts [0, n) into contiguous runs for a kernel that streams its weight from memory, as task
// boundaries in hand-out order (runs [cut[i], cut[i+1])), each a multiple of `unit` except the
// last: first one run per thread of 80% of the work between them, then two per thread of the
// rest. Each new run restarts the prefetchers on a fresh address, so fewer, longer runs stream
// faster (8 equal runs per thread read 7-9% slower than one on the AMD EPYC, batch-1 Q4_0 A/B);
// the small runs at the end still let a thread that was held up hand its share to the other.
std::vector<std::size_t> stream_split(std::size_t n, std::size_t unit = 1);

// While one lives, kernels called on this thread run on it alone, as inside a task: for work
// smaller than what fanning it out costs (a LoRA adapter's rank-wide matmuls over a few rows).
class on_this_thread {
 public:
  on_this_thread();
  ~on_this_thread();
  on_this_thread(const on_this_thread&) = delete;
  on_this_thread& operator=(const on_this_thread&) = delete;

 private:
  bool was_;
};

}  // namespace troupe::kernels
