#include "kernels/cpu/kquant_weight.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quant_weight.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, kquant_task,
                            (const kquant_acts&, std::size_t, const kquant_view&, std::size_t, std::size_t, const float*,
                             float*))

namespace troupe::kernels {

namespace {

// Where weight e's bits go in a record: its nibble's byte (low or high nibble) and, for Q6_K,
// its top bits' byte and shift. Chunk c = e / 64; within it, l = e % 64: the first 32 weights
// are low nibbles, the second 32 high ones, of group g = l % 32 / 4, byte i = l % 4.
struct place {
  std::size_t nibble_byte;  // from the nibbles' start, before adding j * 4
  int nibble_shift;
  std::size_t top_byte;  // from the top bits' start (Q6_K)
  int top_shift;
};
place place_of(kquant_type t, std::size_t e) {
  const std::size_t c = e / 64, l = e % 64, half = l / 32, g = l % 32 / 4, i = l % 4;
  if (t == kquant_type::q5_k)  // one fifth bit per weight: bit 2 (g % 4) + half of the byte
    return {(8 * c + g) * 64 + i, int(4 * half), (2 * c + g / 4) * 64 + i, int(2 * (g % 4) + half)};
  return {(8 * c + g) * 64 + i, int(4 * half), (4 * c + g / 2) * 64 + i, int(2 * (half + 2 * (g % 2)))};
}

// Where a record's nibbles and top bits start, and how many top bits a quant has.
std::size_t nibbles_at(kquant_type t) { return t == kquant_type::q6_k ? 288 : t == kquant_type::iq4_xs ? 160 : 320; }
std::size_t tops_at(kquant_type t) { return t == kquant_type::q6_k ? 2336 : 2368; }
int top_bits(kquant_type t) { return t == kquant_type::q6_k ? 2 : t == kquant_type::q5_k ? 1 : 0; }

void pack_panels(const std::uint8_t* rows, kquant_weight& w) {
  const std::size_t blocks = w.k / kquant_block, rb = kquant_record_bytes(w.type);
  const bool six = w.type == kquant_type::q6_k;
  const std::size_t nibbles = nibbles_at(w.type), tops = tops_at(w.type);
  const int top = top_bits(w.type);
  std::memset(w.data.get(), 0, w.bytes());
  kquant_unpacked u;
  for (std::size_t out = 0; out < w.n; ++out)
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint8_t* block = rows + out * w.row_bytes() + b * kquant_block_bytes(w.type);
      std::uint8_t* rec = w.data.get() + ((out / kquant_panel) * blocks + b) * rb;
      const std::size_t j = out % kquant_panel;
      unpack_kquant_block(w.type, block, u);
      const bool iq4 = w.type == kquant_type::iq4_xs;
      if (six) {
        std::memcpy(rec + 2 * j, block + 208, 2);  // d
        for (std::size_t s = 0; s < 16; ++s) rec[32 + 16 * s + j] = std::uint8_t(std::int8_t(u.scale[s]));
      } else if (iq4) {
        std::memcpy(rec + 2 * j, block, 2);  // d
        for (std::size_t s = 0; s < 8; ++s) rec[32 + 16 * s + j] = std::uint8_t(std::int8_t(u.scale[2 * s]));
      } else {
        std::memcpy(rec + 2 * j, block, 2);           // d (q4_k and q5_k alike)
        std::memcpy(rec + 32 + 2 * j, block + 2, 2);  // dmin
        for (std::size_t s = 0; s < 8; ++s) {
          rec[64 + 16 * s + j] = std::uint8_t(u.scale[2 * s]);
          rec[192 + 16 * s + j] = std::uint8_t(u.min[2 * s]);
        }
      }
      for (std::size_t e = 0; e < kquant_block; ++e) {
        const place at = place_of(w.type, e);
        // IQ4_XS keeps the file's level indices (its sub-block s's weight l is nibble l / 16 of byte l % 16).
        const int nibble = iq4 ? (block[8 + e / 32 * 16 + e % 16] >> (e % 32 < 16 ? 0 : 4)) & 0x0f : u.q[e] & 0x0f;
        rec[nibbles + at.nibble_byte + j * 4] |= std::uint8_t(nibble << at.nibble_shift);
        if (top) rec[tops + at.top_byte + j * 4] |= std::uint8_t((u.q[e] >> 4) << at.top_shift);
      }
    }
}

}  // namespace

void unpack_kquant_record(kquant_type t, const std::uint8_t* rec, std::size_t j, kquant_unpacked& u) {
  const bool six = t == kquant_type::q6_k;
  std::uint16_t h;
  std::memcpy(&h, rec + 2 * j, 2);
  u.d = f16_to_f32(h);
  const bool iq4 = t == kquant_type::iq4_xs;
  if (six) {
    u.dmin = 0;
    for (std::size_t s = 0; s < 16; ++s) u.scale[s] = std::int8_t(rec[32 + 16 * s + j]), u.min[s] = 32 * u.scale[s];
  } else if (iq4) {
    u.dmin = 0;
    for (std::size_t s = 0; s < 8; ++s) {
      u.scale[2 * s] = u.scale[2 * s + 1] = std::int8_t(rec[32 + 16 * s + j]);
      u.min[2 * s] = u.min[2 * s + 1] = 128 * u.scale[2 * s];
    }
  } else {
    std::memcpy(&h, rec + 32 + 2 * j, 2);
    u.dmin = f16_to_f32(h);
    for (std::size_t s = 0; s < 8; ++s) {
      u.scale[2 * s] = u.scale[2 * s + 1] = rec[64 + 16 * s + j];
      u.min[2 * s] = u.min[2 * s + 1] = rec[192 + 16 * s + j];
    }
  }
  const std::size_t nibbles = nibbles_at(t), tops = tops_at(t);
  const int top = top_bits(t);
  for (std::size_t e = 0; e < kquant_block; ++e) {
    const place at = place_of(t, e);
    int q = (rec[nibbles + at.nibble_byte + j * 4] >> at.nibble_shift) & 0x0f;
    if (top) q |= ((rec[tops + at.top_byte + j * 4] >> at.top_shift) & ((1 << top) - 1)) << 4;
    u.q[e] = iq4 ? iq4_unsigned_levels[std::size_t(q)] : std::uint8_t(q);
  }
}

kquant_weight make_kquant_weight(kquant_type t, const std::uint8_t* rows, std::size_t n, std::size_t k) {
  kquant_weight w;
  w.type = t;
  w.n = n;
  w.k = k;
  w.data = alloc_weight_bytes(w.bytes());
  if (w.panelled())
    pack_panels(rows, w);
  else
    std::memcpy(w.data.get(), rows, w.bytes());
  return w;
}

void quantize_kquant_acts(const float* x, std::size_t k, std::int8_t* q, float* dx, std::int32_t* xsum) {
  for (std::size_t b = 0; b < k / kquant_block; ++b) {
    const float* xb = x + b * kquant_block;
    float amax = 0;
    for (std::size_t i = 0; i < kquant_block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    for (std::size_t i = 0; i < kquant_block; ++i) q[b * kquant_block + i] = std::int8_t(std::nearbyint(xb[i] * id));
    dx[b] = d;
  }
  for (std::size_t r = 0; r < k / kquant_run; ++r) {
    std::int32_t s = 0;
    for (std::size_t i = 0; i < kquant_run; ++i) s += q[r * kquant_run + i];
    xsum[r] = s;
  }
}

namespace {

struct act_buffers {
  std::vector<std::int8_t> q;
  std::vector<float> dx;
  std::vector<std::int32_t> xsum;
};

kquant_acts quantize_rows(const float* x, std::size_t rows, std::size_t k, act_buffers& buf) {
  buf.q.resize(rows * k);
  buf.dx.resize(rows * k / kquant_block);
  buf.xsum.resize(rows * k / kquant_run);
  auto one = [&](std::size_t r) {
    quantize_kquant_acts(x + r * k, k, buf.q.data() + r * k, buf.dx.data() + r * (k / kquant_block),
                         buf.xsum.data() + r * (k / kquant_run));
  };
  if (rows >= 16)
    parallel_for(rows, one);
  else
    for (std::size_t r = 0; r < rows; ++r) one(r);
  return {buf.q.data(), buf.dx.data(), buf.xsum.data()};
}

}  // namespace

void kquant_linear(const float* x, std::size_t rows, const kquant_weight& w, const float* bias, float* y) {
  if (rows == 0) return;
  thread_local act_buffers buf;
  const kquant_acts a = quantize_rows(x, rows, w.k, buf);
  const kquant_view v = w.view();
  const auto task = TROUPE_PICK_ISA_FOR(quant_isa(), kquant_task);
  const std::vector<std::size_t> cut = stream_split(w.n, w.panelled() ? kquant_panel : 4);
  parallel_for(cut.size() - 1, [&](std::size_t i) { task(a, rows, v, cut[i], cut[i + 1], bias, y); });
}

void kquant_linear_reference(const float* x, std::size_t rows, kquant_type t, const std::uint8_t* stored_rows,
                             std::size_t n, std::size_t k, const float* bias, float* y) {
  const std::size_t blocks = k / kquant_block, row_bytes = blocks * kquant_block_bytes(t);
  std::vector<std::int8_t> q(k);
  std::vector<float> dx(blocks);
  std::vector<std::int32_t> xsum(k / kquant_run);
  kquant_unpacked u;
  for (std::size_t r = 0; r < rows; ++r) {
    quantize_kquant_acts(x + r * k, k, q.data(), dx.data(), xsum.data());
    for (std::size_t c = 0; c < n; ++c) {
      float acc = 0;
      for (std::size_t b = 0; b < blocks; ++b) {
        unpack_kquant_block(t, stored_rows + c * row_bytes + b * kquant_block_bytes(t), u);
        std::int32_t sumq = 0, summ = 0;
        for (std::size_t s = 0; s < 16; ++s) {
          std::int32_t dot = 0;
          for (std::size_t i = s * kquant_run; i < (s + 1) * kquant_run; ++i) dot += u.q[i] * q[b * kquant_block + i];
          sumq += u.scale[s] * dot;
          summ += u.min[s] * xsum[b * 16 + s];
        }
        acc = kquant_block_step(kquant_folded(t), sumq, summ, u.d, u.dmin, dx[b], acc);
      }
      y[r * n + c] = bias ? acc + bias[c] : acc;
    }
  }
}

}  // namespace troupe::kernels
