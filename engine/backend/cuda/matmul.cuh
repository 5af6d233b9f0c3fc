// cuBLASLt GEMMs for the linear layers (see matmul.cu for the layout mapping).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace zt::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // out (N,OC) = inp (N,C) @ w^T (w: (OC,C)) + bias (may be null)
  void linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C, int OC, cudaStream_t s);
  // dinp (may be null) += dout @ w; dw += dout^T @ inp; dbias (may be null) += sum_n dout
  void linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int N, int C, int OC, cudaStream_t s);
  // C (m,n) = alpha op(A) op(B) + beta C, column-major
  void run(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc, cudaStream_t s);

 private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
};

}  // namespace zt::cuda
