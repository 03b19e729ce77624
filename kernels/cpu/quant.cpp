#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

const char* quant_name(quant_type t) {
  switch (t) {
    case quant_type::q8_0: return "q8_0";
    case quant_type::q4_0: return "q4_0";
    case quant_type::int8: return "int8";
  }
  return "?";
}

std::optional<quant_type> parse_quant_type(const std::string& s) {
  if (s == "q8_0") return quant_type::q8_0;
  if (s == "q4_0") return quant_type::q4_0;
  if (s == "int8") return quant_type::int8;
  return std::nullopt;
}

std::size_t quant_row_bytes(quant_type t, std::size_t k) {
  switch (t) {
    case quant_type::q8_0: return k / quant_block * 34;
    case quant_type::q4_0: return k / quant_block * 18;
    case quant_type::int8: return k;
  }
  return 0;
}

namespace {
void put_f16(std::uint8_t* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
}  // namespace

void quantize_row(quant_type t, const float* x, std::size_t k, std::uint8_t* out, float* scale) {
  if (t == quant_type::int8) {
    float amax = 0;
    for (std::size_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = amax / 127.0f, inv = s != 0 ? 1.0f / s : 0.0f;
    for (std::size_t i = 0; i < k; ++i) out[i] = std::uint8_t(std::int8_t(std::lround(x[i] * inv)));
    *scale = s;
    return;
  }
  for (std::size_t b = 0; b < k / quant_block; ++b) {
    const float* xb = x + b * quant_block;
    if (t == quant_type::q8_0) {
      std::uint8_t* o = out + b * 34;
      float amax = 0;
      for (std::size_t i = 0; i < quant_block; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
      put_f16(o, d);
      for (std::size_t i = 0; i < quant_block; ++i) o[2 + i] = std::uint8_t(std::int8_t(std::lround(xb[i] * id)));
    } else {  // q4_0: the value of largest magnitude maps to -8, as GGML does
      std::uint8_t* o = out + b * 18;
      float amax = 0, max = 0;
      for (std::size_t i = 0; i < quant_block; ++i)
        if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
      const float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
      put_f16(o, d);
      for (std::size_t i = 0; i < quant_block / 2; ++i) {
        const int lo = std::min(15, int(xb[i] * id + 8.5f)), hi = std::min(15, int(xb[i + 16] * id + 8.5f));
        o[2 + i] = std::uint8_t(lo | hi << 4);
      }
    }
  }
}

int quant_at(quant_type t, const std::uint8_t* row, std::size_t i) {
  const std::size_t b = i / quant_block, j = i % quant_block;
  switch (t) {
    case quant_type::q8_0: return std::int8_t(row[b * 34 + 2 + j]);
    case quant_type::q4_0: {
      const std::uint8_t q = row[b * 18 + 2 + j % 16];
      return int(j < 16 ? q & 0x0f : q >> 4) - 8;
    }
    case quant_type::int8: return std::int8_t(row[i]);
  }
  return 0;
}

std::uint16_t block_scale_bits(quant_type t, const std::uint8_t* row, std::size_t b) {
  std::uint16_t h = 0;
  if (t != quant_type::int8) std::memcpy(&h, row + b * (t == quant_type::q8_0 ? 34 : 18), 2);
  return h;
}

void dequantize_row(quant_type t, const std::uint8_t* row, std::size_t k, float scale, float* out) {
  for (std::size_t i = 0; i < k; ++i) {
    const float d = t == quant_type::int8 ? scale : f16_to_f32(block_scale_bits(t, row, i / quant_block));
    out[i] = d * float(quant_at(t, row, i));
  }
}

}  // namespace troupe::kernels
