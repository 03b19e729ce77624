#include "kernels/cpu/dtype.h"

namespace troupe::kernels {

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::int8: return "int8";
  }
  return "?";
}

std::optional<dtype> parse_dtype(const std::string& name) {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::int8})
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return std::uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds past the largest half
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return std::uint16_t(sign);  // below half of the smallest subnormal
    std::uint32_t e = abs >> 23;
    std::uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t shift = 126 - e;  // 113 - e + 13
    std::uint32_t half = man >> shift;
    std::uint32_t rem = man & ((1u << shift) - 1u);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return std::uint16_t(sign | half);
  }
  std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return std::uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

}  // namespace troupe::kernels
