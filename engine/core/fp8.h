// The two 8-bit floating-point formats of Hopper's tensor cores (the OCP 8-bit floating point
// specification; NVIDIA's __nv_fp8_e4m3 and __nv_fp8_e5m2), as bit-exact conversions:
//   E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN, so
//         the largest finite value is S.1111.110 = 448. Subnormals m 2^-9 (m = 1..7).
//   E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is infinity,
//         S.11111.{01,10,11} NaN; the largest finite value is 57344. Subnormals m 2^-16.
// Host arithmetic (the CPU reference, the emulated device's kernels and cuBLASLt); CUDA kernels on
// a GPU convert with the hardware's cvt.rn.satfinite (cuda_fp8.h), which this matches bit for bit
// (tests/cuda/fp8_formats_check.cpp).
// float -> FP8 rounds to nearest, ties to even, and saturates as the hardware's
// cvt.rn.satfinite does (the conversion training uses): a magnitude beyond the largest finite
// value, infinities included, becomes that value with its sign; NaN becomes the canonical NaN
// 0x7F. Zeros keep their sign.
#pragma once
#include <cmath>
#include <cstdint>


namespace zt::fp8 {

enum class Format : uint8_t { E4M3, E5M2 };

struct Spec {
  int exponent_bits, mantissa_bits, bias;
  float max_finite;
};
constexpr Spec spec(Format f) {
  return f == Format::E4M3 ? Spec{4, 3, 7, 448.0f} : Spec{5, 2, 15, 57344.0f};
}
constexpr float max_finite(Format f) { return spec(f).max_finite; }
constexpr uint8_t kCanonicalNaN = 0x7F;

inline float to_float(uint8_t bits, Format f) {
  const Spec s = spec(f);
  const int mant_mask = (1 << s.mantissa_bits) - 1, exp_all = (1 << s.exponent_bits) - 1;
  const bool negative = bits & 0x80;
  const int e = (bits >> s.mantissa_bits) & exp_all, m = bits & mant_mask;
  float v;
  if (f == Format::E4M3 && e == exp_all && m == mant_mask) v = NAN;
  else if (f == Format::E5M2 && e == exp_all) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(float(m), 1 - s.bias - s.mantissa_bits);  // subnormal (or zero)
  else v = std::ldexp(float(m | (mant_mask + 1)), e - s.bias - s.mantissa_bits);
  return negative ? -v : v;
}

// Round half to even of a non-negative double (exact here: every input is a float times a power
// of two, far below 2^52).
inline double round_half_even(double x) {
  const double down = std::floor(x), frac = x - down;
  if (frac > 0.5) return down + 1;
  if (frac < 0.5) return down;
  return std::fmod(down, 2.0) == 0.0 ? down : down + 1;
}

inline uint8_t from_float(float x, Format f) {
  if (std::isnan(x)) return kCanonicalNaN;
  const Spec s = spec(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(double(x));
  if (a == 0.0) return sign;
  const int emin = 1 - s.bias;  // the smallest normal exponent
  int e = 0;
  std::frexp(a, &e);  // a = f 2^e with f in [0.5, 1): a's exponent is e - 1
  const int exponent = (e - 1) < emin ? emin : (e - 1);
  const double quantum = std::ldexp(1.0, exponent - s.mantissa_bits);  // the spacing at a
  const double r = round_half_even(a / quantum) * quantum;
  if (!(r <= double(s.max_finite))) return uint8_t(sign | (f == Format::E4M3 ? 0x7E : 0x7B));  // satfinite
  if (r == 0.0) return sign;
  const int mant_mask = (1 << s.mantissa_bits) - 1;
  int er = 0;
  std::frexp(r, &er);
  const int re = er - 1;  // r's exponent (rounding may have carried into the next binade)
  if (re < emin) return uint8_t(sign | int(r / std::ldexp(1.0, emin - s.mantissa_bits)));  // subnormal
  const int m = int(r / std::ldexp(1.0, re - s.mantissa_bits)) & mant_mask;
  return uint8_t(sign | ((re + s.bias) << s.mantissa_bits) | m);
}

// x rounded to the format and back (the quantize-dequantize of a reference).
inline float round_trip(float x, Format f) { return to_float(from_float(x, f), f); }

}  // namespace zt::fp8
