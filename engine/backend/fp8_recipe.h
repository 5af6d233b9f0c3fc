// FP8 linear layers' recipe (issue 50: per-tensor current scaling, torchao's "tensorwise" and
// Transformer Engine's current scaling): each operand of a linear layer's matrix products is scaled
// by its format's largest value over its own absolute maximum and rounded to FP8 (E4M3 for the
// input and the weight, E5M2 for the output gradient: Transformer Engine's HYBRID formats, the
// gradient's wider range for its outliers), the product accumulated in fp32 and multiplied back by
// the two inverse scales. The bias gradient sums the unquantized output gradient. Plain C++: the
// CPU reference (quantize, then the same products), the CUDA backend and the planner share it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "engine/core/fp8.h"

namespace zt::fp8_recipe {

constexpr fp8::Format kForward = fp8::Format::E4M3;   // input and weight
constexpr fp8::Format kGradient = fp8::Format::E5M2;  // output gradient

// Where the products run in FP8: cuBLASLt's FP8 GEMMs on Hopper need every dimension (rows N,
// inputs C, outputs OC) a multiple of 16; other shapes run in the compute type on every backend.
constexpr bool applies(int64_t N, int64_t C, int64_t OC) {
  return N > 0 && C > 0 && OC > 0 && N % 16 == 0 && C % 16 == 0 && OC % 16 == 0;
}

// [precision] fp8_layers = "auto": whether a linear layer whose weight is (out, in) gains from FP8:
// not when out <= 4096 and in <= 1024 (torchao's auto filter for tensorwise scaling, from its H100
// measurements: the casts cost more than the faster product saves). "all" skips this rule.
constexpr bool worth_it(int64_t out, int64_t in) { return !(out <= 4096 && in <= 1024); }

// scale = largest finite value / amax (torchao's rule: amax below 1e-12 counts as 1e-12), in fp32
inline float scale_for(float amax, fp8::Format f) { return fp8::max_finite(f) / std::max(amax, 1e-12f); }

// The CUDA backend's scratch for one call, in bytes (each region on a 256-byte boundary): the
// amax words and scales, then the FP8 copies. Forward: x (N,C), w (OC,C). Backward: w^T (C,OC),
// x^T (C,N), dy (N,OC), dy^T (OC,N).
constexpr int64_t round256(int64_t b) { return (b + 255) / 256 * 256; }
constexpr int64_t kScalarsBytes = 4096;  // per operand: 256 block maxima, the scale, its inverse
constexpr int64_t forward_scratch_bytes(int64_t N, int64_t C, int64_t OC) {
  return kScalarsBytes + round256(N * C) + round256(OC * C);
}
constexpr int64_t backward_scratch_bytes(int64_t N, int64_t C, int64_t OC) {
  return kScalarsBytes + round256(C * OC) + round256(C * N) + 2 * round256(N * OC);
}

// A weight's FP8 copy, made once per parameter update rather than in every product (where the
// weights stay on the device between micro-batches: ZeRO stages 0-2): its scale and inverse (2
// floats in a 256-byte region), then its (OC, C) E4M3 bytes. The products that take it skip the
// weight's amax and cast (the backward transposes its bytes); the numbers are the same as a cast
// in each product, since the weight and so its scale are the same until the next update.
constexpr int64_t kWeightScalesBytes = 256;
constexpr int64_t weight_copy_bytes(int64_t OC, int64_t C) { return kWeightScalesBytes + round256(OC * C); }

// A product handed a weight copy without the weight (ZeRO-3 gathered the copy alone) that cannot
// run in FP8 after all (no FP8 algorithm): the error it fails with.
inline std::runtime_error weight_only_in_fp8(const char* pass, int N, int C, int OC) {
  char msg[400];
  std::snprintf(msg, sizeof msg,
                "FP8: the %s of a (%d, %d) x (%d, %d) linear layer cannot run in FP8, and ZeRO-3 gathered its weight "
                "as FP8 bytes only: set [precision] fp8_all_gather = false to gather it in the compute type",
                pass, N, C, OC, C);
  return std::runtime_error(msg);
}

}  // namespace zt::fp8_recipe
