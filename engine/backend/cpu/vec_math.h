// exp and tanh that the compiler can vectorize (no libm calls, no branches) for the float path;
// libm's scalar expf/tanhf took ~30% of CPU training time. The double instantiations (used by the
// tests as the reference) call libm.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace zt::cpu {

// exp(x) for float: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), exp(r) by its
// degree-7 Taylor polynomial (truncation < 6e-9 relative), 2^n built in the exponent bits.
// Max relative error ~2 ulp over the normal range; 0 below -87.3; inputs above 88 are clamped to 88 (finite, ~1.65e38).
inline float exp_f32(float x) {
  // ternaries, not fmin/fmax: those keep NaN semantics and compile to libm calls
  const float lo = x < -87.3f ? -87.3f : x;
  const float xc = lo > 88.0f ? 88.0f : lo;
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 = 0.693359375 - 2.1219444e-4
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((int32_t(n) + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

template <typename F>
inline F vexp(F x) {
  if constexpr (std::is_same_v<F, float>) return exp_f32(x);
  else return std::exp(x);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact at the extremes (+-1), absolute error ~1e-7 near 0.
template <typename F>
inline F vtanh(F u) {
  if constexpr (std::is_same_v<F, float>) return 1.0f - 2.0f / (exp_f32(2.0f * u) + 1.0f);
  else return std::tanh(u);
}

}  // namespace zt::cpu
