// Causal attention of query tokens over a paged KV cache (decode and prefill-with-cache, GQA).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

// One layer of the paged cache. Block b, slot s, KV head h is row (b * block_size + s) *
// n_kv_heads + h of `k` and of `v`, kv_row_bytes(type, head_dim) bytes each (an int8 row holds
// its f16 scale after its quants).
struct paged_kv_layer {
  const void* k = nullptr;  // [num_blocks][block_size][n_kv_heads][head_dim]
  const void* v = nullptr;  // same shape
  dtype type = dtype::f32;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // a multiple of 16, at most max_head_dim
};

constexpr int max_head_dim = 256;
constexpr int max_gqa_group = 16;  // query heads per KV head

// What a layer's attention does beyond softmax(q . K * scale) V.
struct attention_options {
  float scale = 1.0f;    // on every score (1 / sqrt(head_dim) unless the family says otherwise)
  int window = 0;        // a sliding window: each token attends to its last `window` positions,
                         // itself included (Mistral, Gemma's local layers); 0: to all of them
  float softcap = 0.0f;  // scores become softcap * tanh(score / softcap) (Gemma 2); 0: none
};

// For each token t: out[t][h] = softmax(q[t][h] . K[0..pos[t]] * scale) V[0..pos[t]] using KV
// head h / (n_heads / n_kv_heads) of the sequence whose block table is tables[t] (block ids of
// positions 0, bs, 2*bs, ...). The keys of positions 0..pos[t] must already be in the cache.
// q, out: [n_tokens][n_heads][head_dim]. Results do not depend on which other tokens share the
// call, nor on the ISA.
void paged_attention(const float* q, std::size_t n_tokens, int n_heads, const std::int32_t* pos,
                     const std::int32_t* const* tables, const paged_kv_layer& kv, float scale,
                     float* out);
// The same with a window (positions max(0, pos[t] - window + 1)..pos[t]; only those need be in
// the cache) and a soft cap on the scores.
void paged_attention(const float* q, std::size_t n_tokens, int n_heads, const std::int32_t* pos,
                     const std::int32_t* const* tables, const paged_kv_layer& kv, const attention_options& opt,
                     float* out);

}  // namespace troupe::kernels
