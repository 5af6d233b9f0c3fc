// engine/core/fp8.h against NVIDIA's own conversions (cuda_fp8.h's host code, the same
// round-to-nearest-even, saturate-to-finite rules as the hardware's cvt.rn.satfinite): every one of
// the 256 codes of each format decodes alike, and 4.3 million floats spread over every exponent
// (each 997th bit pattern: normals, subnormals, infinities, NaNs) plus every tie (the midpoint of
// each two neighbouring codes, and the midpoint past the largest) encode alike, bit for bit. A
// converter that rounds ties away from zero instead is run through the same comparison and must
// differ (the check can fail). Exit 0 when all agree.
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/core/fp8.h"

namespace {

using zt::fp8::Format;

// The planted converter: ties rounded away from zero (everything else as fp8.h's)
uint8_t ties_away(float x, Format f) {
  const uint8_t even = zt::fp8::from_float(x, f);
  const float back = zt::fp8::to_float(even, f);
  const uint8_t next = uint8_t(even + 1);
  if (std::isnan(x) || std::isinf(back) || (even & 0x7F) == 0x7F) return even;
  const float up = zt::fp8::to_float(next, f);
  // an exact tie rounded down to the even code: away from zero takes the next code instead
  if (std::fabs(x) > std::fabs(back) && std::fabs(std::fabs(x) - std::fabs(back)) == std::fabs(std::fabs(up) - std::fabs(x)))
    return next;
  return even;
}

long compare(Format f, uint8_t (*convert)(float, Format), bool quiet) {
  const __nv_fp8_interpretation_t kind = f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  std::vector<float> xs;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 997) {
    const uint32_t bits = uint32_t(u);
    float x;
    std::memcpy(&x, &bits, 4);
    xs.push_back(x);
  }
  for (int code = 0; code < 0x7F; ++code) {  // the ties between neighbours (exact in float), both signs
    const float a = zt::fp8::to_float(uint8_t(code), f), b = zt::fp8::to_float(uint8_t(code + 1), f);
    if (std::isfinite(a) && std::isfinite(b)) xs.push_back((a + b) / 2), xs.push_back(-(a + b) / 2);
  }
  long differ = 0;
  for (const float x : xs) {
    const uint8_t want = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind), got = convert(x, f);
    const bool both_nan = std::isnan(x) && (want & 0x7F) == 0x7F && (got & 0x7F) == 0x7F;
    if (want != got && !both_nan) {
      if (!quiet && differ < 5) std::printf("  %a: NVIDIA 0x%02x, fp8.h 0x%02x\n", double(x), want, got);
      ++differ;
    }
  }
  return differ;
}

}  // namespace

int main() {
  int failures = 0;
  for (Format f : {Format::E4M3, Format::E5M2}) {
    const char* name = f == Format::E4M3 ? "E4M3" : "E5M2";
    const __nv_fp8_interpretation_t kind = f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
    int decode = 0;
    for (int code = 0; code < 256; ++code) {
      const float want = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), kind)));
      const float got = zt::fp8::to_float(uint8_t(code), f);
      const bool nan = std::isnan(want) && std::isnan(got);
      if (!nan && (want != got || std::signbit(want) != std::signbit(got))) ++decode;
    }
    const long encode = compare(f, zt::fp8::from_float, false);
    const long planted = compare(f, ties_away, true);
    std::printf("%s: %d of 256 codes decode differently, %ld of 4.3M floats and ties encode differently; "
                "ties rounded away from zero: %ld differ\n", name, decode, encode, planted);
    failures += decode != 0 || encode != 0 || planted == 0;
  }
  std::printf("%s\n", failures ? "FAIL" : "PASS: fp8.h converts as NVIDIA's cuda_fp8.h does");
  return failures ? 1 : 0;
}
