#include "kernels/cpu/gemm.h"

#include "kernels/cpu/matmul_tile.h"

namespace troupe::kernels::TROUPE_ISA {

#if defined(__AVX512F__)
constexpr int gemm_rows = 6, gemm_panels = 4;  // 24 zmm accumulators
#elif defined(__AVX2__)
constexpr int gemm_rows = 6, gemm_panels = 1;  // 12 ymm accumulators
#else
constexpr int gemm_rows = 2, gemm_panels = 1;
#endif

// One task: a block of rows against a group of panels.
void gemm_task(const float* x, std::size_t rows, const weight_view& w, std::size_t p0,
               std::size_t np, const float* bias, float* y) {
  matmul_block<gemm_rows, gemm_panels>(x, rows, w.k, w, p0, np, bias, y, w.n);
}

std::size_t gemm_panels_per_task() { return gemm_panels; }

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/thread_pool.h"

#include <algorithm>

TROUPE_DECLARE_ISA_VARIANTS(void, gemm_task,
                            (const float*, std::size_t, const weight_view&, std::size_t,
                             std::size_t, const float*, float*))
TROUPE_DECLARE_ISA_VARIANTS(std::size_t, gemm_panels_per_task, ())

namespace troupe::kernels {

void gemm(const float* x, std::size_t rows, const packed_weight& pw, const float* bias, float* y) {
  if (rows == 0) return;
  auto task = TROUPE_PICK_ISA(gemm_task);
  const std::size_t ppt = TROUPE_PICK_ISA(gemm_panels_per_task)();
  const weight_view w = pw.view();
  // The weight block of one task stays in L2 while its rows stream past it.
  constexpr std::size_t rows_per_task = 96;
  const std::size_t col_tasks = (pw.panels + ppt - 1) / ppt;
  const std::size_t row_tasks = (rows + rows_per_task - 1) / rows_per_task;
  parallel_for(col_tasks * row_tasks, [&](std::size_t i) {
    std::size_t c = i / row_tasks, r = i % row_tasks;
    std::size_t p0 = c * ppt, np = std::min(ppt, pw.panels - p0);
    std::size_t r0 = r * rows_per_task, nr = std::min(rows_per_task, rows - r0);
    task(x + r0 * pw.k, nr, w, p0, np, bias, y + r0 * pw.n);
  });
}

}  // namespace troupe::kernels
#endif
