// Writing the K-quant and IQ4_XS formats (kquant.h) without an importance matrix: what
// `troupe model quantize` and the tests' GGUF writer use. Each run of weights gets the scale
// (and, where the format has one, the min) that spans its own values; the super-block's d
// (and dmin) spans the largest of those at the format's scale width; every weight then takes
// its nearest level. llama.cpp searches scales to minimise a weighted error instead; these are
// the plain ones, so a format's error here is a bound, not its best.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/kquant.h"

namespace troupe::kernels {

namespace {

// The f16 value a scale is stored as: quants are chosen against what will be read back.
float stored_f16(std::uint8_t* at, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(at, &h, 2);
  return f16_to_f32(h);
}

void set_bits(std::uint8_t* p, std::size_t byte, int shift, int width, int v) {
  const int mask = ((1 << width) - 1) << shift;
  p[byte] = std::uint8_t((p[byte] & ~mask) | ((v << shift) & mask));
}

// Clamped in float first: a weight far outside its run's range (or not a number) must not
// overflow the conversion.
int nearest(float v, int lo, int hi) {
  if (!(v > float(lo))) return lo;
  return v >= float(hi) ? hi : int(std::nearbyint(v));
}

// Formats with a scale and a min per run and unsigned quants 0..levels (q2_k, q4_k, q5_k):
// each run maps [min(x, 0), max(x)] onto the levels. Fills the integer scales, mins and quants.
void scale_min_runs(const float* x, int run, int levels, int most, std::uint8_t* d_at, std::uint8_t* dmin_at, int* sc,
                    int* mn, int* q) {
  const int runs = int(kquant_block) / run;
  float step[16], low[16], top_step = 0, top_low = 0;
  for (int g = 0; g < runs; ++g) {
    const auto [lo, hi] = std::minmax_element(x + g * run, x + (g + 1) * run);
    low[g] = -std::min(*lo, 0.0f);
    step[g] = (std::max(*hi, 0.0f) + low[g]) / float(levels);
    top_step = std::max(top_step, step[g]);
    top_low = std::max(top_low, low[g]);
  }
  const float d = stored_f16(d_at, top_step / float(most)), dmin = stored_f16(dmin_at, top_low / float(most));
  for (int g = 0; g < runs; ++g) {
    sc[g] = d > 0 ? nearest(step[g] / d, 0, most) : 0;
    mn[g] = dmin > 0 ? nearest(low[g] / dmin, 0, most) : 0;
    const float s = d * float(sc[g]), m = dmin * float(mn[g]);
    for (int i = g * run; i < (g + 1) * run; ++i) q[i] = s > 0 ? nearest((x[i] + m) / s, 0, levels) : 0;
  }
}

// Formats with a signed scale per run and no min: each run's largest magnitude maps to the
// most negative level `-half` (q3_k, q6_k: quants -half..half-1).
void signed_runs(const float* x, int half, int most, std::uint8_t* d_at, int* sc, int* q) {
  float step[16], top = 0;
  for (int g = 0; g < 16; ++g) {
    float v = 0;
    for (int i = g * 16; i < (g + 1) * 16; ++i)
      if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
    step[g] = v / float(-half);
    top = std::max(top, std::fabs(step[g]));
  }
  const float d = stored_f16(d_at, top / float(most));
  for (int g = 0; g < 16; ++g) {
    sc[g] = d > 0 ? nearest(step[g] / d, -most - 1, most) : 0;
    const float s = d * float(sc[g]);
    for (int i = g * 16; i < (g + 1) * 16; ++i) q[i] = s != 0 ? nearest(x[i] / s, -half, half - 1) : 0;
  }
}

void q2_k(const float* x, std::uint8_t* b) {
  int sc[16], mn[16], q[256];
  scale_min_runs(x, 16, 3, 15, b + 80, b + 82, sc, mn, q);
  for (int s = 0; s < 16; ++s) b[s] = std::uint8_t(sc[s] | (mn[s] << 4));
  for (int e = 0; e < 256; ++e) set_bits(b + 16, std::size_t(e / 128 * 32 + e % 32), 2 * (e % 128 / 32), 2, q[e]);
}

void q3_k(const float* x, std::uint8_t* b) {
  int sc[16], q[256];
  signed_runs(x, 4, 31, b + 108, sc, q);
  for (int s = 0; s < 16; ++s) {
    const int stored = sc[s] + 32;
    set_bits(b + 96, std::size_t(s % 8), s < 8 ? 0 : 4, 4, stored & 15);
    set_bits(b + 96, std::size_t(8 + s % 4), 2 * (s / 4), 2, stored >> 4);
  }
  for (int e = 0; e < 256; ++e) {
    const int stored = q[e] + 4;
    set_bits(b + 32, std::size_t(e / 128 * 32 + e % 32), 2 * (e % 128 / 32), 2, stored & 3);
    set_bits(b, std::size_t(e % 32), e / 32, 1, stored >> 2);
  }
}

void q45_k(const float* x, std::uint8_t* b, bool five) {
  int sc[8], mn[8], q[256];
  scale_min_runs(x, 32, five ? 31 : 15, 63, b, b + 2, sc, mn, q);
  std::uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      set_bits(s, std::size_t(j), 0, 6, sc[j]);
      set_bits(s, std::size_t(j + 4), 0, 6, mn[j]);
    } else {
      set_bits(s, std::size_t(j + 4), 0, 4, sc[j] & 15);
      set_bits(s, std::size_t(j - 4), 6, 2, sc[j] >> 4);
      set_bits(s, std::size_t(j + 4), 4, 4, mn[j] & 15);
      set_bits(s, std::size_t(j), 6, 2, mn[j] >> 4);
    }
  }
  std::uint8_t* qs = b + (five ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32;
    set_bits(qs, std::size_t(sub / 2 * 32 + l), 4 * (sub % 2), 4, q[e] & 15);
    if (five) set_bits(b + 16, std::size_t(l), sub, 1, q[e] >> 4);
  }
}

void q6_k(const float* x, std::uint8_t* b) {
  int sc[16], q[256];
  signed_runs(x, 32, 127, b + 208, sc, q);
  for (int s = 0; s < 16; ++s) b[192 + s] = std::uint8_t(std::int8_t(sc[s]));
  for (int e = 0; e < 256; ++e) {
    const int stored = q[e] + 32, half = e / 128, run = e % 128 / 32, l = e % 32;
    set_bits(b, std::size_t(half * 64 + (run % 2) * 32 + l), run < 2 ? 0 : 4, 4, stored & 15);
    set_bits(b + 128, std::size_t(half * 32 + l), 2 * run, 2, stored >> 4);
  }
}

int nearest_level(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i)
    if (std::fabs(v - float(iq4_levels[i])) < std::fabs(v - float(iq4_levels[best]))) best = i;
  return best;
}

void iq4_xs(const float* x, std::uint8_t* b) {
  float step[8], top = 0;
  for (int g = 0; g < 8; ++g) {
    float v = 0;
    for (int i = g * 32; i < (g + 1) * 32; ++i)
      if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
    step[g] = v / -127.0f;
    top = std::max(top, std::fabs(step[g]));
  }
  const float d = stored_f16(b, top / 31.0f);
  std::uint16_t high = 0;
  for (int g = 0; g < 8; ++g) {
    const int sc = d > 0 ? nearest(step[g] / d, -32, 31) : 0, stored = sc + 32;
    set_bits(b + 4, std::size_t(g / 2), 4 * (g % 2), 4, stored & 15);
    high = std::uint16_t(high | ((stored >> 4) << (2 * g)));
    const float s = d * float(sc);
    for (int j = 0; j < 32; ++j) {
      const int level = s != 0 ? nearest_level(x[g * 32 + j] / s) : 0;  // a zero scale reads every level as 0
      set_bits(b + 8, std::size_t(g * 16 + j % 16), j < 16 ? 0 : 4, 4, level);
    }
  }
  std::memcpy(b + 2, &high, 2);
}

}  // namespace

void quantize_kquant_row(kquant_type t, const float* x, std::size_t k, std::uint8_t* out) {
  const std::size_t bytes = kquant_block_bytes(t);
  std::memset(out, 0, k / kquant_block * bytes);
  for (std::size_t b = 0; b < k / kquant_block; ++b, x += kquant_block, out += bytes) switch (t) {
      case kquant_type::q2_k: q2_k(x, out); break;
      case kquant_type::q3_k: q3_k(x, out); break;
      case kquant_type::q4_k: q45_k(x, out, false); break;
      case kquant_type::q5_k: q45_k(x, out, true); break;
      case kquant_type::q6_k: q6_k(x, out); break;
      case kquant_type::iq4_xs: iq4_xs(x, out); break;
    }
}

}  // namespace troupe::kernels
