// RMSNorm over the last dim (Llama), forward and backward.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

namespace {

// Where row r of a norm starts: rows of C channels, `heads` of them at the start of each token's
// row of `stride` elements (a plain norm: heads 1, stride C; Qwen3's per-head q/k norm: the heads
// of the packed qkv), as the CUDA kernels' NormRows.
struct Rows {
  int64_t heads, stride;
  int64_t offset(int64_t r, int C) const { return r / heads * stride + r % heads * C; }
};

template <typename F>
void norm_forward(F* out, F* rstd, const F* inp, const F* weight, int64_t rows, int C, float eps, Rows at) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const F* x = inp + at.offset(r, C);
    F ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const F s = F(1) / std::sqrt(ss / C + F(eps));
    F* o = out + at.offset(r, C);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[r] = s;
  }
}

// y = x s w with s = (mean(x^2) + eps)^(-1/2): dx = s (w dy) - x s^3 mean(w dy x), added to dinp
// (`accumulate`) or written; dweight first, so that dinp may be dout. dweight null: a frozen
// weight (LoRA's base), the input gradient only.
template <typename F>
void norm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight, const F* rstd, int64_t rows,
                   int C, Rows at, bool accumulate) {
  // dweight: threads own channel slices and sum rows in order (fixed reduction order).
  constexpr int kSlice = 64;
  const int n_slices = dweight ? (C + kSlice - 1) / kSlice : 0;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < n_slices; ++sl) {
    const int c0 = sl * kSlice, c1 = std::min(C, c0 + kSlice);
    F dw[kSlice] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const F* x = inp + at.offset(r, C);
      const F* d = dout + at.offset(r, C);
      const F s = rstd[r];
#pragma omp simd
      for (int c = c0; c < c1; ++c) dw[c - c0] += x[c] * s * d[c];
    }
    for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const F* x = inp + at.offset(r, C);
    const F* d = dout + at.offset(r, C);
    const F s = rstd[r];
    F dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += weight[c] * d[c] * x[c];
    const F k = dot / C * s * s * s;
    F* di = dinp + at.offset(r, C);
#pragma omp simd
    for (int c = 0; c < C; ++c) di[c] = (accumulate ? di[c] : F(0)) + (weight[c] * d[c] * s - x[c] * k);
  }
}

}  // namespace

template <typename F>
void rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int N, int C, float eps) {
  norm_forward(out, rstd, inp, weight, N, C, eps, Rows{1, C});
}

template <typename F>
void rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight,
                      const F* rstd, int N, int C) {
  norm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, Rows{1, C}, /*accumulate=*/true);
}

template <typename F>
void head_rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int64_t N, int heads, int hs,
                          int64_t stride, float eps) {
  norm_forward(out, rstd, inp, weight, N * heads, hs, eps, Rows{heads, stride});  // each head a row
}

template <typename F>
void head_rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight, const F* rstd,
                           int64_t N, int heads, int hs, int64_t stride) {
  norm_backward(dinp, dweight, dout, inp, weight, rstd, N * heads, hs, Rows{heads, stride}, /*accumulate=*/false);
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
