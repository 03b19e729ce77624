#include "kernels/cpu/kquant.h"

#include <cstring>

#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

namespace {

float f16_at(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// q4_k and q5_k: scale and min j (0-7) of the 12 packed bytes. The first four of each are the
// low six bits of bytes 0-3 (scales) and 4-7 (mins); the last four keep their low nibbles in
// bytes 8-11 and their top two bits in the spare top bits of bytes 0-3 and 4-7.
void scale_min_k4(const std::uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// q3_k: scale j (0-15) of the 12 packed bytes, still offset by 32. Low nibbles: scales 0-7 in
// bytes 0-7's low nibbles, 8-15 in their high nibbles; the top two bits of scale j are bits
// 2 * (j / 4) of byte 8 + j % 4.
int scale_k3(const std::uint8_t* s, int j) {
  const int low = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | (high << 4);
}

// q2_k and q3_k: the low two bits of weight e. Each half of 128 weights has 32 bytes of
// quants; its four runs of 32 weights are the bytes' bit pairs 0-1 to 6-7, and a run's weight
// l is byte l of the half.
int two_bits(const std::uint8_t* qs, int e) { return (qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3; }

void q2_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int sub = 0; sub < 16; ++sub) {  // 16 weights each, a scale and a min of their own
    const float dl = d * float(scales[sub] & 0x0f), ml = dmin * float(scales[sub] >> 4);
    for (int e = sub * 16; e < sub * 16 + 16; ++e) y[e] = dl * float(two_bits(qs, e)) - ml;
  }
}

void q3_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const std::uint8_t* scales = b + 96;
  const float d = f16_at(b + 108);
  // The third bit of weight e is bit e / 32 of hmask byte e % 32; a clear bit subtracts 4.
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * float(scale_k3(scales, sub) - 32);
    for (int e = sub * 16; e < sub * 16 + 16; ++e) {
      const bool high = (hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * float(two_bits(qs, e) - (high ? 0 : 4));
    }
  }
}

// q4_k, and q5_k where `qh` is given. Four chunks of 64 weights, each 32 bytes of nibbles: the
// low nibbles are the chunk's first 32 weights (sub-block 2c), the high ones its second 32
// (2c + 1). q5_k's fifth bit of sub-block s's weight l is bit s of qh[l].
void q45_k(const std::uint8_t* b, const std::uint8_t* qh, const std::uint8_t* qs, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const std::uint8_t* scales = b + 4;
  for (int sub = 0; sub < 8; ++sub) {
    int sc, mn;
    scale_min_k4(scales, sub, sc, mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    for (int l = 0; l < 32; ++l) {
      int q = (qs[sub / 2 * 32 + l] >> (4 * (sub % 2))) & 0x0f;
      if (qh) q |= ((qh[l] >> sub) & 1) << 4;
      y[sub * 32 + l] = dl * float(q) - ml;
    }
  }
}

void q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  // Two halves of 128 weights (64 bytes of ql, 32 of qh, 8 scales each). In a half, weight
  // run * 32 + l (run 0-3) takes ql byte l (runs 0, 2) or l + 32 (runs 1, 3), its low nibble
  // (runs 0, 1) or high one (runs 2, 3), and bits 2 * run of qh byte l; scale run * 2 + l / 16.
  for (int half = 0; half < 2; ++half)
    for (int run = 0; run < 4; ++run)
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t lo = ql[half * 64 + (run & 1) * 32 + l];
        const int low = run < 2 ? lo & 0x0f : lo >> 4;
        const int high = (qh[half * 32 + l] >> (2 * run)) & 3;
        const int q = (low | (high << 4)) - 32;
        y[half * 128 + run * 32 + l] = d * float(scales[half * 8 + run * 2 + l / 16]) * float(q);
      }
}

void iq4_xs(const std::uint8_t* b, float* y) {
  const float d = f16_at(b);
  std::uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const std::uint8_t* scales_l = b + 4;
  const std::uint8_t* qs = b + 8;
  // Eight sub-blocks of 32, 16 bytes each: low nibbles are its first 16 weights, high its last.
  for (int sub = 0; sub < 8; ++sub) {
    const int scale = ((scales_l[sub / 2] >> (4 * (sub % 2))) & 0x0f) | (((scales_h >> (2 * sub)) & 3) << 4);
    const float dl = d * float(scale - 32);
    for (int j = 0; j < 16; ++j) {
      y[sub * 32 + j] = dl * float(iq4_levels[qs[sub * 16 + j] & 0x0f]);
      y[sub * 32 + 16 + j] = dl * float(iq4_levels[qs[sub * 16 + j] >> 4]);
    }
  }
}

void unpack_scale_min(const std::uint8_t* scales, kquant_unpacked& u) {
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    scale_min_k4(scales, j, sc, mn);
    u.scale[2 * j] = u.scale[2 * j + 1] = sc;
    u.min[2 * j] = u.min[2 * j + 1] = mn;
  }
}

}  // namespace

void unpack_kquant_scales(kquant_type t, const std::uint8_t* b, kquant_unpacked& u) {
  switch (t) {
    case kquant_type::q2_k:
      for (int s = 0; s < 16; ++s) u.scale[s] = b[s] & 0x0f, u.min[s] = b[s] >> 4;
      u.d = f16_at(b + 80), u.dmin = f16_at(b + 82);
      return;
    case kquant_type::q3_k:
      for (int s = 0; s < 16; ++s) u.scale[s] = scale_k3(b + 96, s) - 32, u.min[s] = 4 * u.scale[s];
      u.d = f16_at(b + 108), u.dmin = 0;
      return;
    case kquant_type::q4_k:
    case kquant_type::q5_k:
      unpack_scale_min(b + 4, u);
      u.d = f16_at(b), u.dmin = f16_at(b + 2);
      return;
    case kquant_type::q6_k:
      for (int s = 0; s < 16; ++s) u.scale[s] = std::int8_t(b[192 + s]), u.min[s] = 32 * u.scale[s];
      u.d = f16_at(b + 208), u.dmin = 0;
      return;
    case kquant_type::iq4_xs: {
      std::uint16_t high;
      std::memcpy(&high, b + 2, 2);
      for (int sub = 0; sub < 8; ++sub) {
        const int scale = (((b[4 + sub / 2] >> (4 * (sub % 2))) & 0x0f) | (((high >> (2 * sub)) & 3) << 4)) - 32;
        u.scale[2 * sub] = u.scale[2 * sub + 1] = scale;
        u.min[2 * sub] = u.min[2 * sub + 1] = 128 * scale;
      }
      u.d = f16_at(b), u.dmin = 0;
      return;
    }
  }
}

void unpack_kquant_block(kquant_type t, const std::uint8_t* b, kquant_unpacked& u) {
  unpack_kquant_scales(t, b, u);
  for (int e = 0; e < 256; ++e) {
    int q = 0;
    switch (t) {
      case kquant_type::q2_k: q = two_bits(b + 16, e); break;
      case kquant_type::q3_k: q = two_bits(b + 32, e) + 4 * ((b[e % 32] >> (e / 32)) & 1); break;
      case kquant_type::q4_k:
      case kquant_type::q5_k: {
        const int sub = e / 32, l = e % 32;
        q = (b[(t == kquant_type::q5_k ? 48 : 16) + sub / 2 * 32 + l] >> (4 * (sub % 2))) & 0x0f;
        if (t == kquant_type::q5_k) q |= ((b[16 + l] >> sub) & 1) << 4;
        break;
      }
      case kquant_type::q6_k: {
        const int half = e / 128, run = e % 128 / 32, l = e % 32;
        const std::uint8_t lo = b[half * 64 + (run & 1) * 32 + l];
        q = (run < 2 ? lo & 0x0f : lo >> 4) | (((b[128 + half * 32 + l] >> (2 * run)) & 3) << 4);
        break;
      }
      case kquant_type::iq4_xs: {
        const int sub = e / 32, j = e % 32;
        q = iq4_unsigned_levels[(b[8 + sub * 16 + j % 16] >> (j < 16 ? 0 : 4)) & 0x0f];
        break;
      }
    }
    u.q[e] = std::uint8_t(q);
  }
}

const char* kquant_name(kquant_type t) {
  switch (t) {
    case kquant_type::q2_k: return "q2_k";
    case kquant_type::q3_k: return "q3_k";
    case kquant_type::q4_k: return "q4_k";
    case kquant_type::q5_k: return "q5_k";
    case kquant_type::q6_k: return "q6_k";
    case kquant_type::iq4_xs: return "iq4_xs";
  }
  return "?";
}

std::optional<kquant_type> parse_kquant_type(const std::string& name) {
  for (auto t : {kquant_type::q2_k, kquant_type::q3_k, kquant_type::q4_k, kquant_type::q5_k, kquant_type::q6_k, kquant_type::iq4_xs})
    if (name == kquant_name(t)) return t;
  return std::nullopt;
}

std::size_t kquant_block_bytes(kquant_type t) {
  switch (t) {
    case kquant_type::q2_k: return 84;
    case kquant_type::q3_k: return 110;
    case kquant_type::q4_k: return 144;
    case kquant_type::q5_k: return 176;
    case kquant_type::q6_k: return 210;
    case kquant_type::iq4_xs: return 136;
  }
  return 0;
}

std::optional<kquant_type> kquant_of_ggml(std::uint32_t ggml_type) {
  switch (ggml_type) {
    case 10: return kquant_type::q2_k;
    case 11: return kquant_type::q3_k;
    case 12: return kquant_type::q4_k;
    case 13: return kquant_type::q5_k;
    case 14: return kquant_type::q6_k;
    case 23: return kquant_type::iq4_xs;
    default: return std::nullopt;
  }
}

void dequantize_kquant_row(kquant_type t, const std::uint8_t* row, std::size_t k, float* out) {
  const std::size_t bytes = kquant_block_bytes(t);
  for (std::size_t b = 0; b < k / kquant_block; ++b, row += bytes, out += kquant_block) switch (t) {
      case kquant_type::q2_k: q2_k(row, out); break;
      case kquant_type::q3_k: q3_k(row, out); break;
      case kquant_type::q4_k: q45_k(row, nullptr, row + 16, out); break;
      case kquant_type::q5_k: q45_k(row, row + 16, row + 48, out); break;
      case kquant_type::q6_k: q6_k(row, out); break;
      case kquant_type::iq4_xs: iq4_xs(row, out); break;
    }
}

}  // namespace troupe::kernels
