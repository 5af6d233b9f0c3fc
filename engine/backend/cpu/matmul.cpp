// Linear layer (nn.Linear layout): out = inp @ weight^T + bias, and its backward, on BLAS GEMMs.
#include <algorithm>

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
  // out (N,OC) = inp (N,C) @ weight^T (C,OC)
  gemm<F>(false, true, N, OC, C, F(1), inp, C, weight, C, F(0), out, OC);
  if (!bias) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    F* o = out + int64_t(n) * OC;
#pragma omp simd
    for (int j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC) {
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp) gemm<F>(false, false, N, C, OC, F(1), dout, OC, weight, C, F(1), dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  if (!dweight) return;  // the input gradient alone (the bias gradient goes with the weight's)
  gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);
  if (!dbias) return;
  // dbias: threads own column slices, rows summed in order.
  constexpr int kSlice = 64;
  const int n_slices = (OC + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int s = 0; s < n_slices; ++s) {
    const int j0 = s * kSlice, j1 = std::min(OC, j0 + kSlice);
    F acc[kSlice] = {};
    for (int n = 0; n < N; ++n) {
      const F* d = dout + int64_t(n) * OC;
#pragma omp simd
      for (int j = j0; j < j1; ++j) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; ++j) dbias[j] += acc[j - j0];
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int, int);

}  // namespace zt::cpu
