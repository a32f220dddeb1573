// Element types of every ncclDataType_t, the same on both compilers.
//
// half, bfloat16 and the two fp8 formats are plain storage types here, converted to and from
// float in software with round-to-nearest-even (fp8 conversions saturate to the largest
// finite value, as NVIDIA's fp8 constructors do). Arithmetic on them is done in float and
// rounded back once per operation.
#pragma once

#include <string.h>

#include "kernels/platform.h"

namespace braid::kernels {

BRAID_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
BRAID_INLINE float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/// Rounds the magnitude |f| (given as float bits, finite) to a small float format with
/// `expBits` exponent bits, `mantBits` mantissa bits and `bias`, to nearest, ties to even.
/// Returns the code without sign; a code past the largest finite one means overflow.
BRAID_INLINE uint32_t roundToSmallFloat(uint32_t absBits, int mantBits, int bias) {
  if (absBits < 0x00800000u) return 0;  // zero or a float subnormal: far below every target's range
  const int e = static_cast<int>(absBits >> 23) - 127;
  const uint32_t significand = (absBits & 0x7fffffu) | 0x800000u;
  const int minExp = 1 - bias;
  int shift = 23 - mantBits;
  uint32_t expField = static_cast<uint32_t>(e + bias);
  if (e < minExp) {
    shift += minExp - e;
    expField = 0;
  }
  if (shift >= 32) return 0;
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (q & 1))) ++q;
  if (expField == 0) return q;  // subnormal (reaching 1 << mantBits makes it the least normal)
  return (expField << mantBits) + (q - (1u << mantBits));
}

/// The float value of a small-float code (sign handled by the caller; no inf/NaN codes).
BRAID_INLINE float smallFloatValue(uint32_t code, int mantBits, int bias) {
  const uint32_t exp = code >> mantBits;
  const uint32_t mant = code & ((1u << mantBits) - 1);
  if (exp == 0) return static_cast<float>(mant) * bitsFloat(static_cast<uint32_t>(127 + 1 - bias - mantBits) << 23);
  return bitsFloat(((exp - bias + 127) << 23) | (mant << (23 - mantBits)));
}

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

BRAID_INLINE float toFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000) << 16;
  const uint32_t code = h.bits & 0x7fff;
  if (code >= 0x7c00) return bitsFloat(sign | 0x7f800000u | (static_cast<uint32_t>(code & 0x3ff) << 13));
  return bitsFloat(sign | floatBits(smallFloatValue(code, 10, 15)));
}
BRAID_INLINE Half toHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7e00)};
  const uint32_t code = a == 0x7f800000u ? 0x7c00u : roundToSmallFloat(a, 10, 15);
  return Half{static_cast<uint16_t>(sign | (code >= 0x7c00u ? 0x7c00u : code))};
}

BRAID_INLINE float toFloat(BFloat16 b) { return bitsFloat(static_cast<uint32_t>(b.bits) << 16); }
BRAID_INLINE BFloat16 toBFloat16(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40)};
  return BFloat16{static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16)};
}

// e4m3 ("fn"): bias 7, no infinities, 0x7f is NaN, largest finite 448 (code 0x7e).
BRAID_INLINE float toFloat(Fp8E4M3 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80) << 24;
  const uint32_t code = v.bits & 0x7f;
  if (code == 0x7f) return bitsFloat(sign | 0x7fc00000u);
  return bitsFloat(sign | floatBits(smallFloatValue(code, 3, 7)));
}
BRAID_INLINE Fp8E4M3 toFp8E4M3(float f) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return Fp8E4M3{static_cast<uint8_t>(sign | 0x7f)};
  const uint32_t code = a == 0x7f800000u ? 0x7eu : roundToSmallFloat(a, 3, 7);
  return Fp8E4M3{static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code))};
}

// e5m2: bias 15, IEEE-like (0x7c infinity, above it NaN), largest finite 57344 (code 0x7b).
BRAID_INLINE float toFloat(Fp8E5M2 v) { return toFloat(Half{static_cast<uint16_t>(v.bits << 8)}); }
BRAID_INLINE Fp8E5M2 toFp8E5M2(float f) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return Fp8E5M2{static_cast<uint8_t>(sign | 0x7f)};
  const uint32_t code = a == 0x7f800000u ? 0x7bu : roundToSmallFloat(a, 2, 15);
  return Fp8E5M2{static_cast<uint8_t>(sign | (code > 0x7bu ? 0x7bu : code))};
}

/// Conversion from float into any element type (used for the types computed through float).
template <typename T>
BRAID_INLINE T fromFloat(float f);
template <>
BRAID_INLINE Half fromFloat<Half>(float f) { return toHalf(f); }
template <>
BRAID_INLINE BFloat16 fromFloat<BFloat16>(float f) { return toBFloat16(f); }
template <>
BRAID_INLINE Fp8E4M3 fromFloat<Fp8E4M3>(float f) { return toFp8E4M3(f); }
template <>
BRAID_INLINE Fp8E5M2 fromFloat<Fp8E5M2>(float f) { return toFp8E5M2(f); }

}  // namespace braid::kernels
