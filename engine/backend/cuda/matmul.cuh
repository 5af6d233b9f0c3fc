// cuBLASLt GEMMs for the linear layers (see matmul.cu for the layout mapping). Inputs and
// outputs in the compute type (fp32 / bf16 / fp16), weight gradients accumulated in fp32, fp32
// accumulation throughout; bias and GELU epilogues fused where cuBLASLt offers them.
#pragma once
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <array>
#include <map>
#include <tuple>

#include "engine/core/dtype.h"

namespace zt::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // out (N,OC) = inp (N,C) @ w^T (w: (OC,C)) + bias (OC, may be null); all of type t
  void linear_forward(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC, DType t,
                      cudaStream_t s);
  // pre = inp @ w^T + bias; out = gelu(pre), in one GEMM with the GELU_AUX_BIAS epilogue. False
  // (nothing written) where cuBLASLt has no such algorithm for the shape: the caller falls back.
  bool linear_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias, int N, int C,
                           int OC, DType t, cudaStream_t s);
  // dinp (N,C; type t; may be null) += dout @ w; dw (OC,C; fp32) += dout^T @ inp
  void linear_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w, int N, int C, int OC,
                       DType t, cudaStream_t s);

  struct Args {  // D (m,n) = op(A) op(B) [+ beta D] [epilogue], column-major
    bool ta = false, tb = false;
    int m = 0, n = 0, k = 0;
    const void* A = nullptr;
    int lda = 0;
    const void* B = nullptr;
    int ldb = 0;
    void* D = nullptr;
    int ldd = 0;
    float beta = 0;
    cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
    int epilogue = 1;  // cublasLtEpilogue_t (1 = CUBLASLT_EPILOGUE_DEFAULT)
    const void* bias = nullptr;
    void* aux = nullptr;
    int aux_ld = 0;
  };
  // False when no algorithm exists and `may_fail`; otherwise failures throw.
  bool run(const Args& a, cudaStream_t s, bool may_fail = false);

 private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  // Heuristic results by problem (shape, types, epilogue, pointer alignments): one query per shape.
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int>;
  std::map<Key, std::pair<bool, std::array<char, 64>>> algos_;  // found?, cublasLtMatmulAlgo_t bytes
};

}  // namespace zt::cuda
