#include "kernels/cpu/packed_weight.h"

#include <algorithm>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

std::shared_ptr<std::uint8_t[]> alloc_weight_bytes(std::size_t size) {
  // 2 MiB aligned and advised as huge pages: decode streams every weight once per step, and
  // with 4 KiB pages the TLB misses and prefetch stops at page ends cost a third of it.
  constexpr std::size_t huge = std::size_t(2) << 20;
  const std::size_t align = size >= huge ? huge : 64;
  const std::size_t bytes = std::max<std::size_t>(align, (size + align - 1) / align * align);
  void* raw = std::aligned_alloc(align, bytes);
  if (raw == nullptr) throw std::bad_alloc();
  if (align == huge) ::madvise(raw, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<std::uint8_t[]>(static_cast<std::uint8_t*>(raw), [](std::uint8_t* p) { std::free(p); });
}

packed_weight pack_weight(const void* w, dtype t, std::size_t n, std::size_t k) {
  packed_weight pw;
  pw.type = t;
  pw.n = n;
  pw.k = k;
  pw.panels = (n + group_width - 1) / group_width * panels_per_group;
  const std::size_t es = dtype_size(t);
  pw.data = alloc_weight_bytes(pw.bytes());
  const auto* src = static_cast<const std::uint8_t*>(w);
  std::uint8_t* dst = pw.data.get();
  parallel_for(pw.panels, [&](std::size_t p) {
    std::uint8_t* out = dst + panel_offset(p, k) * es;
    for (std::size_t j = 0; j < panel_width; ++j) {
      std::size_t row = p * panel_width + j;
      for (std::size_t c = 0; c < k; ++c) {
        std::uint8_t* slot = out + (c * group_width + j) * es;
        if (row < n) std::memcpy(slot, src + (row * k + c) * es, es);
        else std::memset(slot, 0, es);
      }
    }
  });
  return pw;
}

float packed_at(const packed_weight& pw, std::size_t row, std::size_t col) {
  std::size_t p = row / panel_width, j = row % panel_width;
  return load_as_f32(pw.panel_ptr(p), pw.type, col * group_width + j);
}

}  // namespace troupe::kernels
