#include "kernels/cpu/quant_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"

TROUPE_DECLARE_ISA_VARIANTS(void, quant_task,
                            (const quant_acts&, std::size_t, const quant_view&, std::size_t, std::size_t, const float*,
                             float*))
TROUPE_DECLARE_ISA_VARIANTS(void, quantize_acts_row,
                            (const float*, std::size_t, std::int8_t*, std::int8_t*, float*, std::int32_t*))

namespace troupe::kernels {

std::size_t quant_weight::bytes() const {
  return panels * (k / quant_block) * quant_record_bytes(type) + (channel_scale ? panels * quant_panel * sizeof(float) : 0);
}

quant_view quant_weight::view() const { return {type, n, k, panels, k / quant_block, data.get(), channel_scale.get()}; }

quant_weight pack_quant_weight(quant_type t, const std::uint8_t* rows, const float* row_scales, std::size_t n, std::size_t k) {
  quant_weight w;
  w.type = t;
  w.n = n;
  w.k = k;
  w.panels = (n + quant_panel - 1) / quant_panel;
  const std::size_t kb = k / quant_block, rb = quant_record_bytes(t), row_bytes = quant_row_bytes(t, k);
  const std::size_t total = w.panels * kb * rb;
  w.data = alloc_weight_bytes(total);
  std::uint8_t* raw = w.data.get();
  std::memset(raw, 0, total);
  if (t == quant_type::int8) {
    w.channel_scale = std::shared_ptr<float[]>(new float[w.panels * quant_panel]());
    std::copy_n(row_scales, n, w.channel_scale.get());
  }
  for (std::size_t p = 0; p < w.panels; ++p)
    for (std::size_t b = 0; b < kb; ++b) {
      std::uint8_t* rec = raw + (p * kb + b) * rb;
      for (std::size_t j = 0; j < quant_panel; ++j) {
        const std::size_t out = p * quant_panel + j;
        const std::uint8_t* row = out < n ? rows + out * row_bytes : nullptr;
        if (t != quant_type::int8 && row) {
          const std::uint16_t h = block_scale_bits(t, row, b);
          std::memcpy(rec + 2 * j, &h, 2);
        }
        for (std::size_t i = 0; i < quant_block; ++i) {
          const int q = row ? quant_at(t, row, b * quant_block + i) : 0;
          if (t == quant_type::q4_0) {
            const std::size_t h = (i % 16) / 4, at = 32 + h * 64 + j * 4 + i % 4;
            rec[at] |= std::uint8_t((q + 8) << (i < 16 ? 0 : 4));
          } else {
            rec[(t == quant_type::q8_0 ? 32 : 0) + (i / 4) * 64 + j * 4 + i % 4] = std::uint8_t(std::int8_t(q));
          }
        }
      }
    }
  return w;
}

void quantize_activations(const float* x, std::size_t k, std::int8_t* q, float* scale, std::int32_t* sum) {
  for (std::size_t b = 0; b < k / quant_block; ++b) {
    const float* xb = x + b * quant_block;
    float amax = 0;
    for (std::size_t i = 0; i < quant_block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    std::int32_t s = 0;
    for (std::size_t i = 0; i < quant_block; ++i) {
      const auto v = std::int8_t(std::nearbyint(xb[i] * id));
      q[b * quant_block + i] = v;
      s += v;
    }
    scale[b] = d;
    sum[b] = s;
  }
}

namespace {

struct act_buffers {
  std::vector<std::int8_t> q, biased;
  std::vector<float> scale;
  std::vector<std::int32_t> offset;
};

// `biased`: also the x + 128 copy, which only the VNNI kernel of the signed formats reads.
quant_acts quantize_rows(const float* x, std::size_t rows, std::size_t k, bool biased, act_buffers& buf) {
  const std::size_t kb = k / quant_block;
  buf.q.resize(rows * k);
  if (biased) buf.biased.resize(rows * k);
  buf.scale.resize(rows * kb);
  buf.offset.resize(rows * kb);
  const auto row_fn = TROUPE_PICK_ISA_FOR(quant_isa(), quantize_acts_row);
  auto one = [&](std::size_t r) {
    row_fn(x + r * k, k, buf.q.data() + r * k, biased ? buf.biased.data() + r * k : nullptr, buf.scale.data() + r * kb,
           buf.offset.data() + r * kb);
  };
  if (rows >= 16)
    parallel_for(rows, one);
  else
    for (std::size_t r = 0; r < rows; ++r) one(r);
  return {buf.q.data(), biased ? buf.biased.data() : nullptr, buf.scale.data(), buf.offset.data()};
}

using task_fn = void (*)(const quant_acts&, std::size_t, const quant_view&, std::size_t, std::size_t, const float*, float*);


}  // namespace

isa quant_isa() {
  if (active_isa() == isa::avx512) return cpu_has_avx512_vnni() ? isa::avx512 : isa::avx2;
  return active_isa();
}

void quant_linear(const float* x, std::size_t rows, const quant_weight& qw, const float* bias, float* y) {
  if (rows == 0) return;
  thread_local act_buffers buf;
  const quant_acts a = quantize_rows(x, rows, qw.k, quant_isa() == isa::avx512 && qw.type != quant_type::q4_0, buf);
  const quant_view w = qw.view();
  const task_fn task = TROUPE_PICK_ISA_FOR(quant_isa(), quant_task);
  const std::vector<std::size_t> cut = stream_split(w.panels);
  parallel_for(cut.size() - 1, [&](std::size_t i) { task(a, rows, w, cut[i], cut[i + 1] - cut[i], bias, y); });
}

void quant_linear_reference(const float* x, std::size_t rows, quant_type t, const std::uint8_t* stored_rows,
                            const float* row_scales, std::size_t n, std::size_t k, const float* bias, float* y) {
  const std::size_t kb = k / quant_block, row_bytes = quant_row_bytes(t, k);
  std::vector<std::int8_t> q(k);
  std::vector<float> dx(kb);
  std::vector<std::int32_t> sum(kb);
  for (std::size_t r = 0; r < rows; ++r) {
    quantize_activations(x + r * k, k, q.data(), dx.data(), sum.data());
    for (std::size_t c = 0; c < n; ++c) {
      const std::uint8_t* row = stored_rows + c * row_bytes;
      float acc = 0;
      for (std::size_t b = 0; b < kb; ++b) {
        std::int32_t isum = 0;
        for (std::size_t i = 0; i < quant_block; ++i) isum += quant_at(t, row, b * quant_block + i) * q[b * quant_block + i];
        const float d = t == quant_type::int8 ? dx[b] : f16_to_f32(block_scale_bits(t, row, b)) * dx[b];
        acc = std::fma(float(isum), d, acc);
      }
      float v = acc;
      if (t == quant_type::int8) v = v * row_scales[c];
      if (bias) v = v + bias[c];
      y[r * n + c] = v;
    }
  }
}

}  // namespace troupe::kernels
