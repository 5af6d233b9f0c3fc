// Linear layers on cuBLASLt (fp32 compute, no TF32, so results track the CPU reference), plus the
// bias kernels. Row-major (N, C) buffers are column-major (C, N) to cuBLAS, so
//   out (N,OC) = inp (N,C) @ W^T      is  out_cm (OC,N) = W_cm^T (OC,C) x inp_cm (C,N)
//   dinp (N,C) += dout (N,OC) @ W     is  dinp_cm (C,N) += W_cm (C,OC) x dout_cm (OC,N)
//   dW (OC,C) += dout^T @ inp         is  dW_cm (C,OC) += inp_cm (C,N) x dout_cm^T (N,OC)
#include <cublasLt.h>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(__FILE__, __LINE__, what, cublasLtGetStatusString(st));
}
}  // namespace

Gemm::Gemm() {
  lt_check(cublasLtCreate(reinterpret_cast<cublasLtHandle_t*>(&handle_)), "cublasLtCreate");
  ZT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Gemm::~Gemm() {
  cudaFree(workspace_);
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

// C (m,n) = alpha op(A) op(B) + beta C, column-major, fp32.
void Gemm::run(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc, cudaStream_t s) {
  cublasLtMatmulDesc_t desc;
  lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  cublasLtMatrixLayout_t la, lb, lc;
  lt_check(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, lda), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc), "layout C");
  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  lt_check(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), desc, la, lb, lc, lc, pref, 1,
                                          &heur, &found), "heuristic");
  if (found == 0) fail(__FILE__, __LINE__, "cublasLt", "no algorithm for this GEMM");
  lt_check(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc,
                          &heur.algo, workspace_, kWorkspaceBytes, s), "cublasLtMatmul");
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

void Gemm::linear_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C, int OC,
                          cudaStream_t s) {
  run(true, false, OC, N, C, 1.0f, w, C, inp, C, 0.0f, out, OC, s);
  if (bias) add_bias(out, bias, N, OC, s);
}

void Gemm::linear_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                           int N, int C, int OC, cudaStream_t s) {
  if (dinp) run(false, false, C, N, OC, 1.0f, w, C, dout, OC, 1.0f, dinp, C, s);
  run(false, true, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, C, s);
  if (dbias) bias_backward(dbias, dout, N, OC, s);
}

}  // namespace zt::cuda
