// The FP8 linear layers' reference (engine/backend/fp8_recipe.h): each operand quantized to FP8
// with its per-tensor scale (the values kept as floats, exactly), the products of the quantized
// operands on the fp32 GEMM, times the two inverse scales, as cuBLASLt's FP8 GEMM applies them.
#include <cmath>
#include <vector>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/fp8_recipe.h"

namespace zt::cpu {

float fp8_quantize(const float* x, int64_t n, fp8::Format f, float* q) {
  float amax = 0;
  fp8_amax(&amax, x, n);
  const float scale = fp8_recipe::scale_for(amax, f);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) q[i] = fp8::round_trip(x[i] * scale, f);
  return 1.0f / scale;
}

void fp8_amax(float* amax, const float* x, int64_t n) {
  float m = amax[0];
#pragma omp parallel for reduction(max : m) schedule(static)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  amax[0] = m;
}

void fp8_cast_with_amax(uint8_t* q, float* scales, const float* x, int64_t n, const float* amax) {
  const float scale = fp8_recipe::scale_for(amax[0], fp8_recipe::kForward);  // as fp8_quantize's
  scales[0] = scale;
  scales[1] = 1.0f / scale;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) q[i] = fp8::from_float(x[i] * scale, fp8_recipe::kForward);
}

void fp8_weight_copy(uint8_t* copy, const float* weight, int OC, int C) {
  // the whole weight as one piece: its scales (the products read the inverse, [1]), then its bytes
  const int64_t n = int64_t(OC) * C;
  float amax = 0.0f;
  fp8_amax(&amax, weight, n);
  fp8_cast_with_amax(copy + fp8_recipe::kWeightScalesBytes, reinterpret_cast<float*>(copy), weight, n, &amax);
}

namespace {
// The weight's FP8 values (as floats) in w (OC C) and its inverse scale: cast here, or read from its copy
float weight_fp8(const float* weight, const uint8_t* copy, int OC, int C, std::vector<float>& w) {
  const int64_t n = int64_t(OC) * C;
  w.resize(size_t(n));
  if (!copy) return fp8_quantize(weight, n, fp8_recipe::kForward, w.data());
  const uint8_t* bytes = copy + fp8_recipe::kWeightScalesBytes;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) w[size_t(i)] = fp8::to_float(bytes[i], fp8_recipe::kForward);
  return reinterpret_cast<const float*>(copy)[1];
}
}  // namespace

void matmul_forward_fp8(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        const uint8_t* w_copy) {
  std::vector<float> x(size_t(N) * C), w;
  const float inv_x = fp8_quantize(inp, int64_t(N) * C, fp8_recipe::kForward, x.data());
  const float inv_w = weight_fp8(weight, w_copy, OC, C, w);
  // out (N,OC) = inv_x inv_w x (N,C) @ w^T (C,OC), then the bias
  gemm<float>(false, true, N, OC, C, inv_x * inv_w, x.data(), C, w.data(), C, 0.0f, out, OC);
  if (!bias) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < OC; ++j) out[int64_t(n) * OC + j] += bias[j];
}

void matmul_backward_fp8(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const uint8_t* w_copy) {
  std::vector<float> dy(size_t(N) * OC), w;
  const float inv_dy = fp8_quantize(dout, int64_t(N) * OC, fp8_recipe::kGradient, dy.data());
  const float inv_w = dinp ? weight_fp8(weight, w_copy, OC, C, w) : 0.0f;
  // dinp (N,C) = inv_dy inv_w dy (N,OC) @ w (OC,C), written
  if (dinp) gemm<float>(false, false, N, C, OC, inv_dy * inv_w, dy.data(), OC, w.data(), C, 0.0f, dinp, C);
  if (!dweight) return;
  std::vector<float> x(size_t(N) * C);
  const float inv_x = fp8_quantize(inp, int64_t(N) * C, fp8_recipe::kForward, x.data());
  // dweight (OC,C) += inv_dy inv_x dy^T (OC,N) @ x (N,C)
  gemm<float>(true, false, OC, C, N, inv_dy * inv_x, dy.data(), OC, x.data(), C, 1.0f, dweight, C);
  if (!dbias) return;
  for (int n = 0; n < N; ++n)  // rows in order
    for (int j = 0; j < OC; ++j) dbias[j] += dout[int64_t(n) * OC + j];
}

}  // namespace zt::cpu
