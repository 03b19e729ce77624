#include "kernels/cpu/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define TROUPE_STREAM_SSE2 1
#endif

namespace troupe::kernels {

void stream_copy(void* dst, const void* src, std::size_t n) {
#ifdef TROUPE_STREAM_SSE2
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  // Up to the destination's first 16-byte boundary with a plain copy, then 64 bytes at a time
  // with streaming stores (SSE2: every x86-64 has them), then the tail.
  const std::size_t head = std::min(n, std::size_t((16 - (reinterpret_cast<std::uintptr_t>(d) & 15)) & 15));
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
#else
  std::memcpy(dst, src, n);
#endif
}

void stream_fence() {
#ifdef TROUPE_STREAM_SSE2
  _mm_sfence();
#endif
}

}  // namespace troupe::kernels
