#include "kernels/cpu/gemv.h"

#include "kernels/cpu/matmul_tile.h"

namespace troupe::kernels::TROUPE_ISA {

#if defined(__AVX512F__)
constexpr int gemv_rows = 4, gemv_panels = 4;
#elif defined(__AVX2__)
constexpr int gemv_rows = 4, gemv_panels = 1;
#else
constexpr int gemv_rows = 2, gemv_panels = 1;
#endif

void gemv_task(const float* x, std::size_t rows, const weight_view& w, std::size_t p0,
               std::size_t np, const float* bias, float* y) {
  // Rows beyond the tile height re-read the same panels, which are hot in L1/L2 by then.
  matmul_block<gemv_rows, gemv_panels>(x, rows, w.k, w, p0, np, bias, y, w.n);
}

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, gemv_task,
                            (const float*, std::size_t, const weight_view&, std::size_t,
                             std::size_t, const float*, float*))

namespace troupe::kernels {

void gemv(const float* x, std::size_t rows, const packed_weight& pw, const float* bias, float* y) {
  if (rows == 0) return;
  auto task = TROUPE_PICK_ISA(gemv_task);
  const weight_view w = pw.view();
  // Whole groups per task, so each task streams one contiguous run.
  const std::vector<std::size_t> cut = stream_split(pw.panels, panels_per_group);
  parallel_for(cut.size() - 1, [&](std::size_t i) { task(x, rows, w, cut[i], cut[i + 1] - cut[i], bias, y); });
}

void linear(const float* x, std::size_t rows, const packed_weight& w, const float* bias, float* y) {
  if (rows <= 8) gemv(x, rows, w, bias, y);
  else gemm(x, rows, w, bias, y);
}

}  // namespace troupe::kernels
#endif
