// __half and __nv_bfloat16 for the emulated device: 16-bit storage types with the CUDA headers'
// names and conversions (round to nearest even, NaN kept quiet), so the kernels' to_float /
// from_float paths compute what the GPU computes. Arithmetic goes through float. Written apart
// from the CPU backend's engine/core/dtype.h on purpose: test-backend-ops compares the two
// backends, and one shared conversion would let a rounding bug pass every comparison.
#pragma once
#include <cstdint>
#include <cstring>

namespace zt::emu {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
inline float bf16_bits_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }
// IEEE binary16, round to nearest even (subnormals and overflow to infinity as the hardware does)
inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (a < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    const float mag = bits_float(a) * 16777216.0f;  // scaled by 2^24: the subnormal's integer mantissa
    // nearest-even rounding of mag to an integer, exact because mag < 1024
    float r = mag + 8388608.0f;  // 2^23: the fraction bits fall off with round-to-nearest-even
    r -= 8388608.0f;
    return uint16_t(sign | uint32_t(r));
  }
  const uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 112;  // rebias 127 -> 15
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // carries into the exponent correctly
  return uint16_t(sign | h);
}
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0) {
    const float m = float(mant) * (1.0f / 16777216.0f);  // 2^-24 units
    return sign ? -m : m;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}
}  // namespace zt::emu

struct __half {
  uint16_t __x;
  __half() = default;
  __half(float f) : __x(zt::emu::float_to_half_bits(f)) {}
  __half(double f) : __half(float(f)) {}
  __half(int i) : __half(float(i)) {}
  operator float() const { return zt::emu::half_bits_to_float(__x); }
};
struct __half2 {
  __half x, y;
};
struct __nv_bfloat16 {
  uint16_t __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(zt::emu::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double f) : __nv_bfloat16(float(f)) {}
  __nv_bfloat16(int i) : __nv_bfloat16(float(i)) {}
  operator float() const { return zt::emu::bf16_bits_to_float(__x); }
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2 && sizeof(__half2) == 4 && sizeof(__nv_bfloat162) == 4);

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__half(lo), __half(hi)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__nv_bfloat16(lo), __nv_bfloat16(hi)}; }
inline float __low2float(__half2 v) { return float(v.x); }
inline float __high2float(__half2 v) { return float(v.y); }
inline float __low2float(__nv_bfloat162 v) { return float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return float(v.y); }
