#include "kernels/cpu/gemv.h"

#include "kernels/cpu/matmul_tile.h"

namespace troupe::kernels::TROUPE_ISA {

#if defined(__AVX512F__)
constexpr int gemv_rows = 6, gemv_panels = 4;
#elif defined(__AVX2__)
constexpr int gemv_rows = 6, gemv_panels = 1;
#else
constexpr int gemv_rows = 2, gemv_panels = 1;
#endif
constexpr int gemv_tiles = 4;  // tiles of rows that share one read of the weight (sliced)

void gemv_task(const float* x, std::size_t rows, const weight_view& w, std::size_t p0,
               std::size_t np, const float* bias, float* y) {
  if (rows <= std::size_t(gemv_rows)) return matmul_block<gemv_rows, gemv_panels>(x, rows, w.k, w, p0, np, bias, y, w.n);
  if (rows <= std::size_t(gemv_rows * gemv_tiles)) {
    return matmul_block_sliced<gemv_rows, gemv_panels, gemv_tiles>(x, rows, w.k, w, p0, np, bias, y, w.n);
  }
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
  if (rows <= 16) gemv(x, rows, w, bias, y);
  else gemm(x, rows, w, bias, y);
}

}  // namespace troupe::kernels
#endif
