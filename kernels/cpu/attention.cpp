#include "kernels/cpu/attention.h"

#include <cstring>
#include <utility>

#include "kernels/cpu/simd.h"

#if !defined(__AVX2__)
#define _mm_prefetch(p, hint) __builtin_prefetch(p)
#else
#include <immintrin.h>
#endif

namespace troupe::kernels::TROUPE_ISA {

namespace {

constexpr int key_block = 16;  // keys scored together: one vec16 of scores per query head

inline const void* kv_row(const void* base, const paged_kv_layer& kv, const std::int32_t* table,
                          std::int32_t p, int h) {
  std::size_t block = std::size_t(table[p / kv.block_size]);
  std::size_t slot = std::size_t(p % kv.block_size);
  std::size_t row = (block * kv.block_size + slot) * kv.n_kv_heads + h;
  return static_cast<const std::uint8_t*>(base) + row * kv_row_bytes(kv.type, std::size_t(kv.head_dim));
}

inline const void* offset(const void* p, int elems, dtype t) {
  return static_cast<const std::uint8_t*>(p) + std::size_t(elems) * dtype_size(t);
}

// Elements [c * 16, c * 16 + 16) of a K or V row as f32; an int8 row's are its quants times the
// row's f16 scale (`scale`, read once per row), the values kv_cache::read gives.
inline vec16 load_kv16(const void* row, int c, dtype t, float scale) {
  if (t == dtype::int8) return mul16(load16_i8(static_cast<const std::int8_t*>(row) + c * panel), splat16(scale));
  return load16_any(offset(row, c * panel, t), t);
}

inline float row_scale(const void* row, const paged_kv_layer& kv) {
  if (kv.type != dtype::int8) return 1.0f;
  std::uint16_t h;
  std::memcpy(&h, static_cast<const std::uint8_t*>(row) + kv.head_dim, 2);
  return f16_to_f32(h);
}

#define TROUPE_INLINE inline __attribute__((always_inline))

// One block's rows, prefetched while the block before it is scored: a sequence's rows for one
// KV head are scattered (a stride per slot).
TROUPE_INLINE void prefetch_rows(const void* const* krows, const void* const* vrows, int n, std::size_t row_bytes) {
  for (int j = 0; j < n; ++j)
    for (std::size_t b = 0; b < row_bytes; b += 64) {
      _mm_prefetch(static_cast<const char*>(krows[j]) + b, _MM_HINT_T0);
      _mm_prefetch(static_cast<const char*>(vrows[j]) + b, _MM_HINT_T0);
    }
}

// The block's keys in f32, zero past the context.
template <int chunks>
TROUPE_INLINE void load_keys(vec16 (*kb)[chunks], const void* const* krows, int cn, const paged_kv_layer& kv) {
  for (int j = 0; j < key_block; ++j) {
    if (j < cn) {
      const float ks = row_scale(krows[j], kv);
      for (int c = 0; c < chunks; ++c) kb[j][c] = load_kv16(krows[j], c, kv.type, ks);
    } else {
      for (int c = 0; c < chunks; ++c) kb[j][c] = zero16();
    }
  }
}

// Each query head's 16 scaled scores against the block's keys, into p[g]; soft-capped when
// `softcap` is set (Gemma 2: softcap * tanh(score / softcap)).
template <int chunks>
TROUPE_INLINE void score_block(float (*p)[key_block], const float* qh, const vec16 (*kb)[chunks], int group, int hd, float scale,
                               float softcap) {
  for (int g = 0; g < group; ++g) {
    vec16 qv[chunks], d[key_block];
    for (int c = 0; c < chunks; ++c) qv[c] = load16(qh + g * hd + c * panel);
    for (int j = 0; j < key_block; ++j) {
      d[j] = zero16();
      for (int c = 0; c < chunks; ++c) d[j] = fma16(qv[c], kb[j][c], d[j]);
    }
    vec16 s = mul16(hsum16x16(d), splat16(scale));
    if (softcap > 0.0f) s = mul16(tanh16(div16(s, splat16(softcap))), splat16(softcap));
    store16(p[g], s);
  }
}

// The online softmax over one block: a new maximum rescales what was accumulated, and p[g]
// becomes the block's weights (zero past the context).
template <int chunks>
TROUPE_INLINE void softmax_block(float (*p)[key_block], float* m, float* l, vec16 (*acc)[chunks], int group, int cn) {
  for (int g = 0; g < group; ++g) {
    float bm = p[g][0];
    for (int j = 1; j < cn; ++j) bm = p[g][j] > bm ? p[g][j] : bm;
    if (bm > m[g]) {
      const float corr = __builtin_expf(m[g] - bm);
      l[g] *= corr;
      const vec16 cv = splat16(corr);
      for (int c = 0; c < chunks; ++c) acc[g][c] = mul16(acc[g][c], cv);
      m[g] = bm;
    }
    for (int j = cn; j < key_block; ++j) p[g][j] = m[g];  // finite filler for the vector exp
    store16(p[g], exp16(add16(load16(p[g]), splat16(-m[g]))));
    for (int j = cn; j < key_block; ++j) p[g][j] = 0.0f;  // past the context: no weight
    l[g] += hsum16(load16(p[g]));
  }
}

// acc[g] += the block's value rows weighted by p[g]; each value row is loaded once for the group.
template <int chunks>
TROUPE_INLINE void accumulate_values(vec16 (*acc)[chunks], const float (*p)[key_block], const void* const* vrows, int cn, int group,
                                     const paged_kv_layer& kv) {
  for (int j = 0; j < cn; ++j) {
    const float vs = row_scale(vrows[j], kv);
    for (int c = 0; c < chunks; ++c) {
      vec16 vv = load_kv16(vrows[j], c, kv.type, vs);
      for (int g = 0; g < group; ++g) acc[g][c] = fma16(splat16(p[g][j]), vv, acc[g][c]);
    }
  }
}

}  // namespace

// All query heads of KV head `h` for token `t`: they share every key and value row loaded.
// Keys go 16 at a time: each key row is loaded once for the whole group, the 16 scores of a
// query head become one vector whose softmax weights come from one vector exp, and the online
// softmax rescales once per block. The steps are forced inline: this is the decode hot loop.
// `chunks` (head_dim / 16) is a template parameter so the per-dimension loops unroll whole.
template <int chunks>
void attention_head(const float* q, int n_heads, const std::int32_t* pos,
                    const std::int32_t* const* tables, const paged_kv_layer& kv, const attention_options& opt,
                    float* out, std::size_t t, int h) {
  const int group = n_heads / kv.n_kv_heads;
  const int hd = kv.head_dim;
  const std::int32_t* table = tables[t];
  const std::int32_t len = pos[t] + 1;
  const std::int32_t first = opt.window > 0 && len > opt.window ? len - opt.window : 0;  // the window's oldest position
  vec16 acc[max_gqa_group][chunks];
  float m[max_gqa_group], l[max_gqa_group];
  alignas(64) float p[max_gqa_group][key_block];
  vec16 kb[key_block][chunks];
  const float* qh = q + (t * n_heads + std::size_t(h) * group) * hd;
  for (int g = 0; g < group; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    for (int c = 0; c < chunks; ++c) acc[g][c] = zero16();
  }
  const std::size_t row_bytes = kv_row_bytes(kv.type, std::size_t(hd));
  const void* krows[2][key_block];
  const void* vrows[2][key_block];
  auto locate = [&](std::int32_t c0, int which) {  // row addresses of a block of keys
    const int cn = len - c0 < key_block ? int(len - c0) : key_block;
    for (int j = 0; j < cn; ++j) {
      krows[which][j] = kv_row(kv.k, kv, table, c0 + j, h);
      vrows[which][j] = kv_row(kv.v, kv, table, c0 + j, h);
    }
    return cn;
  };
  locate(first, 0);
  for (std::int32_t c0 = first, cur = 0; c0 < len; c0 += key_block, cur ^= 1) {
    const int cn = len - c0 < key_block ? int(len - c0) : key_block;
    if (c0 + key_block < len) prefetch_rows(krows[cur ^ 1], vrows[cur ^ 1], locate(c0 + key_block, cur ^ 1), row_bytes);
    load_keys<chunks>(kb, krows[cur], cn, kv);
    score_block<chunks>(p, qh, kb, group, hd, opt.scale, opt.softcap);
    softmax_block<chunks>(p, m, l, acc, group, cn);
    accumulate_values<chunks>(acc, p, vrows[cur], cn, group, kv);
  }
  for (int g = 0; g < group; ++g) {
    vec16 inv = splat16(1.0f / l[g]);
    float* o = out + (t * n_heads + std::size_t(h) * group + g) * hd;
    for (int c = 0; c < chunks; ++c) store16(o + c * panel, mul16(acc[g][c], inv));
  }
}

#undef TROUPE_INLINE

using head_fn = void (*)(const float*, int, const std::int32_t*, const std::int32_t* const*,
                         const paged_kv_layer&, const attention_options&, float*, std::size_t, int);

template <int... C>
constexpr auto head_table(std::integer_sequence<int, C...>) {
  struct t { head_fn f[sizeof...(C)]; };
  return t{{&attention_head<C + 1>...}};
}

void attention_task(const float* q, int n_heads, const std::int32_t* pos,
                    const std::int32_t* const* tables, const paged_kv_layer& kv, const attention_options& opt,
                    float* out, std::size_t t, int h) {
  static constexpr auto table = head_table(std::make_integer_sequence<int, max_head_dim / panel>{});
  table.f[kv.head_dim / panel - 1](q, n_heads, pos, tables, kv, opt, out, t, h);
}

}  // namespace troupe::kernels::TROUPE_ISA

#if defined(TROUPE_ISA_SCALAR)
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, attention_task,
                            (const float*, int, const std::int32_t*, const std::int32_t* const*,
                             const paged_kv_layer&, const attention_options&, float*, std::size_t, int))

namespace troupe::kernels {

void paged_attention(const float* q, std::size_t n_tokens, int n_heads, const std::int32_t* pos,
                     const std::int32_t* const* tables, const paged_kv_layer& kv, const attention_options& opt,
                     float* out) {
  auto task = TROUPE_PICK_ISA(attention_task);
  const std::size_t heads = std::size_t(kv.n_kv_heads);
  parallel_for(n_tokens * heads, [&](std::size_t i) {
    task(q, n_heads, pos, tables, kv, opt, out, i / heads, int(i % heads));
  });
}

void paged_attention(const float* q, std::size_t n_tokens, int n_heads, const std::int32_t* pos,
                     const std::int32_t* const* tables, const paged_kv_layer& kv, float scale,
                     float* out) {
  paged_attention(q, n_tokens, n_heads, pos, tables, kv, attention_options{scale}, out);
}

}  // namespace troupe::kernels
#endif
