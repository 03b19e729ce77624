#include "kernels/cpu/packed_weight.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/thread_pool.h"

namespace troupe::kernels {

packed_weight pack_weight(const void* w, dtype t, std::size_t n, std::size_t k) {
  packed_weight pw;
  pw.type = t;
  pw.n = n;
  pw.k = k;
  pw.panels = (n + 15) / 16;
  const std::size_t es = dtype_size(t);
  std::size_t bytes = (pw.bytes() + 63) / 64 * 64;
  void* raw = std::aligned_alloc(64, bytes);
  if (raw == nullptr) throw std::bad_alloc();
  pw.data = std::shared_ptr<std::uint8_t[]>(static_cast<std::uint8_t*>(raw), [](std::uint8_t* p) { std::free(p); });
  const auto* src = static_cast<const std::uint8_t*>(w);
  std::uint8_t* dst = pw.data.get();
  parallel_for(pw.panels, [&](std::size_t p) {
    std::uint8_t* out = dst + p * k * 16 * es;
    for (std::size_t j = 0; j < 16; ++j) {
      std::size_t row = p * 16 + j;
      for (std::size_t c = 0; c < k; ++c) {
        std::uint8_t* slot = out + (c * 16 + j) * es;
        if (row < n) std::memcpy(slot, src + (row * k + c) * es, es);
        else std::memset(slot, 0, es);
      }
    }
  });
  return pw;
}

float packed_at(const packed_weight& pw, std::size_t row, std::size_t col) {
  std::size_t p = row / 16, j = row % 16;
  return load_as_f32(pw.panel_ptr(p), pw.type, col * 16 + j);
}

}  // namespace troupe::kernels
