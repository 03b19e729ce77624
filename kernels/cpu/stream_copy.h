// Copying bytes that will not be read again soon (a KV transfer larger than the caches): stores
// that bypass the cache (non-temporal), so the copy neither reads the destination's lines for
// ownership nor evicts the working set. glibc's memcpy does the same only for one large copy;
// a transfer is thousands of block-sized copies, each under its threshold, and ran at about
// 55% of memcpy's bandwidth without this (troupe bench kv-transfer, 256 MiB).
#pragma once
#include <cstddef>

namespace troupe::kernels {

// Same effect as memcpy(dst, src, n) (no overlap). Call stream_fence() once after a run of
// them, before another thread reads the destination.
void stream_copy(void* dst, const void* src, std::size_t n);
void stream_fence();

}  // namespace troupe::kernels
