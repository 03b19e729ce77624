// Element types of weights and KV cache, and exact scalar conversions to f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace troupe::kernels {

// int8 is a KV cache type only (weights have their own quantized formats, quant.h/kquant.h):
// each KV row of head_dim elements is int8 quants followed by the row's f16 scale.
enum class dtype : std::uint8_t { f32, f16, bf16, int8 };
// The last dtype: a byte read off the wire names a dtype only if it is at most this.
constexpr dtype last_dtype = dtype::int8;

// Bytes per element of `t`.
constexpr std::size_t dtype_size(dtype t) { return t == dtype::f32 ? 4 : t == dtype::int8 ? 1 : 2; }
// Bytes of one KV row (one token, one KV head) of `head_dim` elements: the elements, and for
// int8 the row's f16 scale after them (element i is q[i] * scale).
constexpr std::size_t kv_row_bytes(dtype t, std::size_t head_dim) { return head_dim * dtype_size(t) + (t == dtype::int8 ? 2 : 0); }
const char* dtype_name(dtype t);
// The dtype named `name` ("f32", "f16", "bf16", "int8"), or nothing.
std::optional<dtype> parse_dtype(const std::string& name);

// IEEE half -> float, exact for every input (subnormals, inf, NaN included).
inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      bits = sign | std::uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// float -> IEEE half, round to nearest even (what _mm_cvtps_ph(x, 0) does).
std::uint16_t f32_to_f16(float f);

inline float bf16_to_f32(std::uint16_t b) {
  std::uint32_t bits = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// float -> bfloat16, round to nearest even; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::uint16_t(bits >> 16);
}

// Reads element i of a buffer of type t as f32.
inline float load_as_f32(const void* p, dtype t, std::size_t i) {
  switch (t) {
    case dtype::f32: return static_cast<const float*>(p)[i];
    case dtype::f16: return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case dtype::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case dtype::int8: return float(static_cast<const std::int8_t*>(p)[i]);  // the quant; its row's scale is the caller's
  }
  return 0.0f;
}

inline void store_from_f32(void* p, dtype t, std::size_t i, float v) {
  switch (t) {
    case dtype::f32: static_cast<float*>(p)[i] = v; break;
    case dtype::f16: static_cast<std::uint16_t*>(p)[i] = f32_to_f16(v); break;
    case dtype::bf16: static_cast<std::uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case dtype::int8: static_cast<std::int8_t*>(p)[i] = std::int8_t(v); break;  // a quant already rounded
  }
}

}  // namespace troupe::kernels
