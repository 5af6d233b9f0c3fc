// cuBLASLt GEMMs for the linear layers (see matmul.cu for the layout mapping). Inputs and
// outputs in the compute type (fp32 / bf16 / fp16), weight gradients accumulated in fp32, fp32
// accumulation throughout; bias, GELU, GELU-gradient and bias-gradient epilogues fused where
// cuBLASLt offers them (one pass over the output instead of two or three).
#pragma once
#include <cuda_runtime.h>
#include <library_types.h>

#include <array>
#include <cstddef>
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
  // dinp (N,C; type t; may be null) = dout @ w (written), times gelu'(gelu_pre) when gelu_pre
  // (N,C) is given (the DGELU epilogue); dw (OC,C; fp32) += dout^T @ inp; dbias (OC; fp32; may be
  // null) += column sums of dout, from the weight GEMM's BGRADB epilogue. Where cuBLASLt has no
  // fused algorithm for a shape, the separate kernels run instead. `scratch`:
  // column_scratch_floats(OC) floats.
  void linear_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       const void* gelu_pre, int N, int C, int OC, DType t, float* scratch, cudaStream_t s);

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
    const void* bias = nullptr;  // the bias (BIAS epilogues) or the bias gradient's output (BGRAD*)
    cudaDataType_t bias_type = CUDA_R_32F;
    const void* aux = nullptr;
    int aux_ld = 0;
  };
  // False when no algorithm exists and `may_fail`; otherwise failures throw.
  bool run(const Args& a, cudaStream_t s, bool may_fail = false);

 private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  // Everything cuBLASLt needs for one problem (shape, types, epilogue, pointer alignments), made
  // once: the descriptors and the heuristic's algorithm. A call only sets its pointers.
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int, int>;
  struct Plan {
    void* desc = nullptr;               // cublasLtMatmulDesc_t
    std::array<void*, 3> layouts = {};  // cublasLtMatrixLayout_t of A, B, D
    bool found = false;
    std::array<char, 64> algo = {};  // cublasLtMatmulAlgo_t bytes
  };
  std::map<Key, Plan> plans_;
  const Plan& plan(const Args& a);
};

}  // namespace zt::cuda
