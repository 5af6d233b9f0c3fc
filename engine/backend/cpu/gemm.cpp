// GEMM through OpenBLAS (cblas), float and double. Built with ZTRAIN_NO_BLAS (tools/gpu_check.sh:
// the GPU machine has no OpenBLAS, and the CPU backend is only the reference there, at small
// sizes) it is a plain OpenMP loop instead.
#ifndef ZTRAIN_NO_BLAS
#include <cblas.h>
#endif

#include "engine/backend/cpu/ops.h"

namespace zt::cpu {

#ifndef ZTRAIN_NO_BLAS
template <>
void gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
template <typename F>
static void gemm_loops(bool ta, bool tb, int M, int N, int K, F alpha, const F* A, int lda, const F* B, int ldb,
                       F beta, F* C, int ldc) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      F acc = 0;
      for (int k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * acc + (beta == F(0) ? F(0) : beta * C[i * ldc + j]);
    }
}

template <>
void gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  gemm_loops(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda, const double* B,
                  int ldb, double beta, double* C, int ldc) {
  gemm_loops(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

}  // namespace zt::cpu
