// RMSNorm over the last dim (Llama), forward and backward.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    F ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const F s = F(1) / std::sqrt(ss / C + F(eps));
    F* o = out + int64_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

template <typename F>
void rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight,
                      const F* rstd, int N, int C) {
  // y = x s w with s = (mean(x^2) + eps)^(-1/2): dx = s (w dy) - x s^3 mean(w dy x).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    const F* d = dout + int64_t(n) * C;
    const F s = rstd[n];
    F dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += weight[c] * d[c] * x[c];
    const F k = dot / C * s * s * s;
    F* di = dinp + int64_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) di[c] += weight[c] * d[c] * s - x[c] * k;
  }
  // dweight: threads own channel slices and sum rows in order (fixed reduction order).
  constexpr int kSlice = 64;
  const int n_slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < n_slices; ++sl) {
    const int c0 = sl * kSlice, c1 = std::min(C, c0 + kSlice);
    F dw[kSlice] = {};
    for (int n = 0; n < N; ++n) {
      const F* x = inp + int64_t(n) * C;
      const F* d = dout + int64_t(n) * C;
      const F s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) dw[c - c0] += x[c] * s * d[c];
    }
    for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
  }
}

template <typename F>
void head_rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int64_t N, int heads, int hs,
                          int64_t stride, float eps) {
  // Each head is a row of its own: the row norm above, on rows found by (token, head).
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N * heads; ++r) {
    const int64_t off = r / heads * stride + r % heads * hs;
    const F* x = inp + off;
    F ss = 0;
    for (int c = 0; c < hs; ++c) ss += x[c] * x[c];
    const F s = F(1) / std::sqrt(ss / hs + F(eps));
    F* o = out + off;
    for (int c = 0; c < hs; ++c) o[c] = x[c] * s * weight[c];
    rstd[r] = s;
  }
}

template <typename F>
void head_rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight, const F* rstd,
                           int64_t N, int heads, int hs, int64_t stride) {
  // dweight first: dinp may be dout. dweight[c] = sum over rows (in order) of x s dy.
  std::vector<F> dw(size_t(hs), F(0));
  for (int64_t r = 0; r < N * heads; ++r) {
    const int64_t off = r / heads * stride + r % heads * hs;
    for (int c = 0; c < hs; ++c) dw[size_t(c)] += inp[off + c] * rstd[r] * dout[off + c];
  }
  for (int c = 0; c < hs; ++c) dweight[c] += dw[size_t(c)];
  // dx = s (w dy) - x s^3 mean(w dy x), each row read whole before it is written
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N * heads; ++r) {
    const int64_t off = r / heads * stride + r % heads * hs;
    const F* x = inp + off;
    const F* d = dout + off;
    const F s = rstd[r];
    F dot = 0;
    for (int c = 0; c < hs; ++c) dot += weight[c] * d[c] * x[c];
    const F k = dot / hs * s * s * s;
    F* di = dinp + off;
    for (int c = 0; c < hs; ++c) di[c] = weight[c] * d[c] * s - x[c] * k;
  }
}

template void head_rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int, int, int64_t,
                                          float);
template void head_rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                           int64_t, int, int, int64_t);
template void head_rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int, int, int64_t,
                                           float);
template void head_rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*,
                                            const double*, int64_t, int, int, int64_t);
template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int, float);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*, int, int);

}  // namespace zt::cpu
