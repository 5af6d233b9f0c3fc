// LayerNorm over the last dim, forward and backward.
#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const F m = sum / C;
    F var = 0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const F s = F(1) / std::sqrt(var / C + F(eps));
    F* o = out + int64_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp,
                        const F* weight, const F* mean, const F* rstd, int N, int C) {
  // dinp: rows are independent.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    const F* d = dout + int64_t(n) * C;
    const F m = mean[n], s = rstd[n];
    F dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; ++c) {
      const F dnorm = weight[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    F* di = dinp + int64_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const F norm = (x[c] - m) * s;
      di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  // dweight, dbias: threads own channel slices and sum rows in order (fixed reduction order).
  // Null: a frozen weight and bias (LoRA's base), the input gradient only.
  if (!dweight) return;
  constexpr int kSlice = 64;
  const int n_slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < n_slices; ++sl) {
    const int c0 = sl * kSlice, c1 = std::min(C, c0 + kSlice);
    F dw[kSlice] = {}, db[kSlice] = {};
    for (int n = 0; n < N; ++n) {
      const F* x = inp + int64_t(n) * C;
      const F* d = dout + int64_t(n) * C;
      const F m = mean[n], s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) {
        dw[c - c0] += (x[c] - m) * s * d[c];
        db[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int, int, float);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*, const double*, const double*, int, int);

}  // namespace zt::cpu
