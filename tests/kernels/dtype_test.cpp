#define BOOST_TEST_MODULE kernels_dtype
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <immintrin.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dtype.h"

using namespace troupe::kernels;

BOOST_AUTO_TEST_CASE(f16_round_trips_every_finite_half) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN payloads
    float f = f16_to_f32(std::uint16_t(h));
    BOOST_TEST_REQUIRE(f32_to_f16(f) == h, "half 0x" << std::hex << h);
  }
}

__attribute__((target("f16c"))) static std::uint16_t hw_to_half(float f) {
  return std::uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
__attribute__((target("f16c"))) static float hw_from_half(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(short(h))));
}

BOOST_AUTO_TEST_CASE(f16_conversion_matches_hardware) {
  if (detected_isa() == isa::scalar) return;  // no F16C to compare against
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;
    std::uint32_t a, b;
    float fa = f16_to_f32(std::uint16_t(h)), fb = hw_from_half(std::uint16_t(h));
    std::memcpy(&a, &fa, 4);
    std::memcpy(&b, &fb, 4);
    BOOST_TEST_REQUIRE(a == b);
  }
  // Rounding of values between halves, subnormal results, overflow.
  std::uint32_t bits = 0x2f000000u;
  while (bits < 0x48000000u) {
    float f;
    std::memcpy(&f, &bits, 4);
    BOOST_TEST_REQUIRE(f32_to_f16(f) == hw_to_half(f), "float bits 0x" << std::hex << bits);
    BOOST_TEST_REQUIRE(f32_to_f16(-f) == hw_to_half(-f));
    bits += 0x1235u;
  }
}

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even) {
  BOOST_TEST(f32_to_bf16(1.0f) == 0x3f80);
  BOOST_TEST(bf16_to_f32(0x3f80) == 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  BOOST_TEST(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  BOOST_TEST(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  BOOST_TEST(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}
