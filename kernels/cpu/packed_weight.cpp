#include "kernels/cpu/packed_weight.h"

#include <algorithm>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

std::shared_ptr<std::uint8_t[]> alloc_weight_bytes(std::size_t size) {
  // 2 MiB aligned and advised as huge pages: decode streams every weight once per step, and
  // with 4 KiB pages the TLB misses and prefetch stops at page ends cost a third of it.
  constexpr std::size_t huge = std::size_t(2) << 20;
  if (size < huge) {
    const std::size_t bytes = std::max<std::size_t>(64, (size + 63) / 64 * 64);
    void* raw = std::aligned_alloc(64, bytes);
    if (raw == nullptr) throw std::bad_alloc();
    return std::shared_ptr<std::uint8_t[]>(static_cast<std::uint8_t*>(raw), [](std::uint8_t* p) { std::free(p); });
  }
  // A fresh mapping, advised before anything touches it: the advice only shapes pages faulted
  // in after it, and memory from malloc may be a region the loader used (and faulted in 4 KiB
  // pages) a moment before. down_proj's weights came back that way: 0 of its 8 MiB in huge
  // pages, streamed at 46 GB/s in a step against 60 for gate_up_proj.
  const std::size_t bytes = (size + huge - 1) / huge * huge;
  void* map = ::mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::uint8_t*>(map);
  auto* aligned = base + (huge - reinterpret_cast<std::uintptr_t>(base) % huge) % huge;
  // Keep exactly [aligned, aligned + bytes): the rest goes back.
  const std::size_t head = std::size_t(aligned - base);
  if (head) ::munmap(base, head);
  if (huge > head) ::munmap(aligned + bytes, huge - head);
  ::madvise(aligned, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<std::uint8_t[]>(aligned, [bytes](std::uint8_t* p) { ::munmap(p, bytes); });
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
