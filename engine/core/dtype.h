// Element types of activations and compute-precision weights ([precision] compute), and host
// conversions between them. bf16 and fp16 are stored as their 16-bit patterns; conversions round
// to nearest, ties to even, exactly as CUDA's __float2bfloat16 / __float2half, so the CPU backend
// emulates the GPU's storage rounding bit for bit (the maths stays fp32 on both).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace zt {

enum class DType { F32, BF16, F16 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "fp32" : t == DType::BF16 ? "bf16" : "fp16";
}

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

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a (quiet) NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);  // overflow rounds to inf, as it should
}
inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                // rounds to >= 65520: inf
  if (a >= 0x38800000u) {                                     // normal half (>= 2^-14)
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1);          // round mantissa 23 -> 10 bits
    return sign | uint16_t((r - 0x38000000u) >> 13);          // rebias exponent 127 -> 15
  }
  if (a < 0x33000000u) return sign;                           // below half the smallest subnormal
  // Subnormal half: value = m * 2^-24; shift the full significand, round to nearest even.
  const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24 (e in [102, 112])
  const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  return sign | uint16_t(q + (rem > half || (rem == half && (q & 1))));
}
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));  // inf / NaN
  if (e != 0) return bits_float(sign | ((e + 112) << 23) | (m << 13));
  return (sign ? -1.0f : 1.0f) * float(m) * 5.9604644775390625e-8f;  // subnormal: m * 2^-24
}

// dst[i] = src[i] converted (host memory); F32 -> 16-bit rounds to nearest even.
inline void convert_host(void* dst, DType dt, const void* src, DType st, int64_t n) {
  if (dt == st) {
    std::memcpy(dst, src, size_t(n) * dtype_size(dt));
    return;
  }
  auto load = [&](int64_t i) -> float {
    if (st == DType::F32) return static_cast<const float*>(src)[i];
    const uint16_t h = static_cast<const uint16_t*>(src)[i];
    return st == DType::BF16 ? bf16_to_float(h) : fp16_to_float(h);
  };
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(i);
    if (dt == DType::F32) static_cast<float*>(dst)[i] = x;
    else static_cast<uint16_t*>(dst)[i] = dt == DType::BF16 ? float_to_bf16(x) : float_to_fp16(x);
  }
}

}  // namespace zt
