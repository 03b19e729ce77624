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

void pack_q4k_panels(const std::uint8_t* rows, kquant_weight& w) {
  const std::size_t blocks = w.k / kquant_block, panels = (w.n + kquant_panel - 1) / kquant_panel;
  std::memset(w.data.get(), 0, w.bytes());
  kquant_unpacked u;
  for (std::size_t out = 0; out < w.n; ++out)
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint8_t* block = rows + out * w.row_bytes() + b * kquant_block_bytes(kquant_type::q4_k);
      std::uint8_t* rec = w.data.get() + ((out / kquant_panel) * blocks + b) * q4k_record_bytes;
      const std::size_t j = out % kquant_panel;
      unpack_kquant_block(kquant_type::q4_k, block, u);
      std::memcpy(rec + 2 * j, block, 2);        // d
      std::memcpy(rec + 32 + 2 * j, block + 2, 2);  // dmin
      for (std::size_t s = 0; s < 8; ++s) {
        rec[64 + 16 * s + j] = std::uint8_t(u.scale[2 * s]);
        rec[192 + 16 * s + j] = std::uint8_t(u.min[2 * s]);
      }
      for (std::size_t c = 0; c < 4; ++c)
        for (std::size_t g = 0; g < 8; ++g)
          for (std::size_t i = 0; i < 4; ++i)
            rec[320 + (8 * c + g) * 64 + j * 4 + i] =
                std::uint8_t(u.q[64 * c + 4 * g + i] | (u.q[64 * c + 32 + 4 * g + i] << 4));
    }
  (void)panels;
}

}  // namespace

void unpack_q4k_record(const std::uint8_t* rec, std::size_t j, kquant_unpacked& u) {
  std::uint16_t h;
  std::memcpy(&h, rec + 2 * j, 2);
  u.d = f16_to_f32(h);
  std::memcpy(&h, rec + 32 + 2 * j, 2);
  u.dmin = f16_to_f32(h);
  for (std::size_t s = 0; s < 8; ++s) {
    u.scale[2 * s] = u.scale[2 * s + 1] = rec[64 + 16 * s + j];
    u.min[2 * s] = u.min[2 * s + 1] = rec[192 + 16 * s + j];
  }
  for (std::size_t c = 0; c < 4; ++c)
    for (std::size_t g = 0; g < 8; ++g)
      for (std::size_t i = 0; i < 4; ++i) {
        const std::uint8_t q = rec[320 + (8 * c + g) * 64 + j * 4 + i];
        u.q[64 * c + 4 * g + i] = q & 0x0f;
        u.q[64 * c + 32 + 4 * g + i] = q >> 4;
      }
}

kquant_weight make_kquant_weight(kquant_type t, const std::uint8_t* rows, std::size_t n, std::size_t k) {
  kquant_weight w;
  w.type = t;
  w.n = n;
  w.k = k;
  w.panelled = t == kquant_type::q4_k;
  w.data = alloc_weight_bytes(w.bytes());
  if (w.panelled)
    pack_q4k_panels(rows, w);
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
  const std::vector<std::size_t> cut = stream_split(w.n, w.panelled ? kquant_panel : 4);
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
